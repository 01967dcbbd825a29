import test from 'ava';
import {
  decodeAck,
  decodeHello,
  decodeRequest,
  encodeAck,
  encodeHello,
  encodeRequest,
  type ZdsRequest,
} from './zds-messages.js';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

// Bytes written by hand from zds.proto's field numbers, as Istio's encoders emit them.
test('messages carry zds.proto field numbers', (t) => {
  t.is(hex(encodeHello()), '0801', 'ZdsHello.version = 1 (V1)');
  t.is(
    hex(encodeRequest({ kind: 'add', uid: 'p1' })),
    '0a040a027031',
    'WorkloadRequest.add = 1, AddWorkload.uid = 1',
  );
  t.is(
    hex(encodeRequest({ kind: 'del', uid: 'p1' })),
    '120412027031',
    'WorkloadRequest.del = 2, DelWorkload.uid = 2',
  );
  t.is(
    hex(encodeRequest({ kind: 'keep', uid: 'p1' })),
    '2a040a027031',
    'WorkloadRequest.keep = 5, KeepWorkload.uid = 1',
  );
  t.is(hex(encodeRequest({ kind: 'snapshotSent' })), '1a00', 'WorkloadRequest.snapshot_sent = 3');
  t.is(hex(encodeAck('')), '0a00', 'WorkloadResponse.ack = 1, empty error left out');
  t.is(hex(encodeAck('x')), '0a030a0178', 'Ack.error = 1');
  // AddWorkload.workload_info = 2; WorkloadInfo name 1, namespace 2, service_account 3.
  t.is(
    hex(encodeRequest({ kind: 'add', uid: 'p', info: { name: 'n', namespace: 's', serviceAccount: 'a' } })),
    '0a0e0a017012090a016e1201731a0161',
  );
});

test('every request decodes to what was encoded', (t) => {
  const reqs: ZdsRequest[] = [
    { kind: 'add', uid: '6f1c2a9e-5b1d-4c1e-9a43-0c9d2b7c1e11' },
    { kind: 'add', uid: 'p1', info: { name: 'web-0', namespace: 'shop', serviceAccount: 'web' } },
    { kind: 'keep', uid: 'p1' },
    { kind: 'del', uid: 'p1' },
    { kind: 'snapshotSent' },
  ];
  for (const r of reqs) t.deepEqual(decodeRequest(encodeRequest(r)), { ok: true, value: r });
  t.deepEqual(decodeHello(encodeHello()), { ok: true, value: { version: 1 } });
  t.deepEqual(decodeAck(encodeAck('ZM_ERR_ZDS_WORKLOAD: no')), {
    ok: true,
    value: { error: 'ZM_ERR_ZDS_WORKLOAD: no' },
  });
});

test('malformed or disallowed messages are reasons, never throws', (t) => {
  const bad = (bytes: Uint8Array | number[], why: RegExp) => {
    const r = decodeRequest(Uint8Array.from(bytes));
    t.false(r.ok);
    if (!r.ok) t.regex(r.error.join('; '), why);
  };
  bad([], /no payload/);
  bad([0xff, 0xff, 0xff], /malformed/);
  bad([0x0a, 0x10, 0x0a], /malformed/); // length beyond the buffer
  bad(encodeRequest({ kind: 'add', uid: '' }), /uid/);
  bad(encodeRequest({ kind: 'del', uid: '../../etc' }), /uid/);
  bad(encodeRequest({ kind: 'keep', uid: 'x'.repeat(200) }), /uid/);
  bad(
    encodeRequest({ kind: 'add', uid: 'p', info: { name: 'a/b', namespace: 's', serviceAccount: 'a' } }),
    /workload_info/,
  );
  t.false(decodeHello(Uint8Array.from([0x08, 0x02])).ok, 'an unknown version is refused');
  t.false(decodeHello(Uint8Array.from([])).ok, 'NOT_USED is refused');
  t.false(decodeAck(Uint8Array.from([])).ok, 'a response without an ack');
  t.false(decodeAck(Uint8Array.from([0x0a])).ok, 'a cut-off ack');
});
