import { execFileSync } from 'node:child_process';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import { MeshMetrics } from '@zmesh/shared';
import test, { type ExecutionContext } from 'ava';
import { fdOf } from './bpf-capture.js';
import { listenInNetns, NetnsHandle } from './netns-listener.js';
import {
  batchSucceeded,
  type IpBatch,
  type IpResult,
  REPLY_MARK,
  ReplySteering,
  steeringCommands,
} from './reply-steering.js';
import * as sys from './sys.js';
import { TransparentConnector } from './transparent-connect.js';

/** A fake `ip` that records each batch and answers from a script (default: success). */
function fakeIp(
  answer: (family: 4 | 6, lines: readonly string[]) => IpResult = () => ({ code: 0, stderr: '' }),
) {
  const calls: Array<{ family: 4 | 6; lines: readonly string[] }> = [];
  const run: IpBatch = async (_path, family, lines) => {
    calls.push({ family, lines });
    return answer(family, lines);
  };
  return { run, calls };
}

function fakeSysctl(initial: string) {
  const state = { value: initial, writes: [] as string[] };
  return {
    state,
    fwmarkAccept: {
      get: () => state.value,
      set: (_ns: unknown, v: string) => {
        state.writes.push(v);
        state.value = v;
      },
    },
  };
}

test('install adds the fwmark rule and the local table for both families and turns tcp_fwmark_accept on', async (t) => {
  const ip = fakeIp();
  const sysctl = fakeSysctl('0');
  const s = new ReplySteering({
    netns: '/x',
    netnsPath: '/x',
    run: ip.run,
    fwmarkAccept: sysctl.fwmarkAccept,
  });
  t.deepEqual(await s.install(), { 4: undefined, 6: undefined });
  t.deepEqual(
    ip.calls.map((c) => c.family),
    [4, 6],
  );
  t.deepEqual(ip.calls[0]!.lines, [
    'rule add fwmark 0x15008 lookup 15008 pref 15008',
    'route replace local default dev lo table 15008',
  ]);
  t.is(sysctl.state.value, '1');
  await s.remove();
  t.deepEqual(ip.calls.slice(2)[0]!.lines, steeringCommands('del'));
  t.is(sysctl.state.value, '0', 'the pod gets its tcp_fwmark_accept back');
  t.truthy(s.unavailable(4), 'after removal no transparent connect is allowed');
});

test('installing twice is idempotent: an existing rule is success, the sysctl is left as found', async (t) => {
  const ip = fakeIp(() => ({ code: 1, stderr: 'RTNETLINK answers: File exists\nCommand failed -:1\n' }));
  const sysctl = fakeSysctl('1');
  const s = new ReplySteering({
    netns: '/x',
    netnsPath: '/x',
    run: ip.run,
    fwmarkAccept: sysctl.fwmarkAccept,
  });
  t.deepEqual(await s.install(), { 4: undefined, 6: undefined });
  await s.remove();
  t.deepEqual(sysctl.state.writes, [], 'already 1: never written, never restored');
});

test('a family whose steering fails is reported with the reason, and only that family', async (t) => {
  const ip = fakeIp((family) =>
    family === 6
      ? { code: 2, stderr: 'RTNETLINK answers: Address family not supported by protocol\n' }
      : { code: 0, stderr: '' },
  );
  const s = new ReplySteering({
    netns: '/x',
    netnsPath: '/x',
    run: ip.run,
    fwmarkAccept: fakeSysctl('0').fwmarkAccept,
  });
  const status = await s.install();
  t.is(status[4], undefined);
  t.regex(status[6] ?? '', /ip -6: .*Address family not supported/);
});

test('without tcp_fwmark_accept no family is steered (replies would not carry the mark)', async (t) => {
  const ip = fakeIp();
  const s = new ReplySteering({
    netns: '/x',
    netnsPath: '/x',
    run: ip.run,
    fwmarkAccept: {
      get: () => {
        throw new Error('EACCES');
      },
      set: () => {},
    },
  });
  const status = await s.install();
  t.regex(status[4] ?? '', /tcp_fwmark_accept/);
  t.regex(status[6] ?? '', /tcp_fwmark_accept/);
  t.is(ip.calls.length, 0);
});

test('batch results: benign errors per operation only', (t) => {
  t.true(batchSucceeded('add', { code: 0, stderr: '' }));
  t.true(batchSucceeded('add', { code: 1, stderr: 'RTNETLINK answers: File exists\nCommand failed -:1' }));
  t.false(batchSucceeded('add', { code: 1, stderr: 'RTNETLINK answers: Operation not permitted' }));
  t.false(batchSucceeded('add', { code: 1, stderr: '' }), 'a failure with no message is a failure');
  t.false(batchSucceeded('add', { code: -1, stderr: 'spawn nsenter ENOENT' }));
  t.true(batchSucceeded('del', { code: 1, stderr: 'RTNETLINK answers: No such file or directory' }));
  t.false(batchSucceeded('del', { code: 1, stderr: 'RTNETLINK answers: File exists' }));
});

/*
 * Real kernel, a scratch namespace of our own (prefix not the cluster's `zm-`): addresses
 * on lo stand in for the pod's, and nothing routes out of it.
 */
const NETNS = `zmsteer-${process.pid}`;
const NETNS_PATH = `/run/netns/${NETNS}`;
const isRoot = process.getuid?.() === 0;
const servers: Server[] = [];

function rootTest(title: string, fn: (t: ExecutionContext) => Promise<void>): void {
  if (isRoot) test.serial(title, fn);
  else test.serial.skip(`${title} [skipped: needs root for namespaces and IP_TRANSPARENT]`, fn);
}

test.before(() => {
  if (!isRoot) return;
  execFileSync('ip', ['netns', 'add', NETNS]);
  const ip = (...args: string[]) => execFileSync('ip', ['-n', NETNS, ...args]);
  ip('link', 'set', 'lo', 'up');
  ip('addr', 'add', '10.99.0.1/32', 'dev', 'lo');
  ip('-6', 'addr', 'add', 'fd99::1/128', 'dev', 'lo', 'nodad');
});

test.after.always(() => {
  for (const s of servers) s.close();
  if (isRoot) execFileSync('ip', ['netns', 'del', NETNS]);
});

/** A server in the namespace answering with the peer it saw and the mark of the accepted socket. */
async function peerServer(host: string): Promise<number> {
  const server = createServer((s: Socket) => {
    s.on('error', () => {});
    s.end(JSON.stringify({ peer: s.remoteAddress, mark: sys.mark(fdOf(s)!) }));
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen({ fd: listenInNetns(NETNS_PATH, host, 0) }, resolve));
  return (server.address() as AddressInfo).port;
}

function answer(s: Socket, timeoutMs = 1500): Promise<string> {
  return new Promise((resolve) => {
    let data = '';
    const timer = setTimeout(() => {
      s.destroy();
      resolve('TIMEOUT');
    }, timeoutMs);
    s.on('data', (d) => {
      data += d;
    });
    s.on('end', () => s.end()); // the connector's sockets are half-open capable
    s.on('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      resolve(e.code ?? e.message);
    });
    s.on('close', () => {
      clearTimeout(timer);
      resolve(data);
    });
  });
}

rootTest(
  'a transparent connect shows the client address to the server, replies steered back; removed, they are not',
  async (t) => {
    const netns = new NetnsHandle(NETNS_PATH);
    const steering = new ReplySteering({ netns, netnsPath: NETNS_PATH });
    const connector = new TransparentConnector(new MeshMetrics({ defaultMetrics: false }).registry);
    const pod = { uid: 'p', netns, steering };
    try {
      t.deepEqual(await steering.install(), { 4: undefined, 6: undefined });
      t.deepEqual(await steering.install(), { 4: undefined, 6: undefined }, 'idempotent');
      const rules = execFileSync('ip', ['-n', NETNS, 'rule', 'show'], { encoding: 'utf8' });
      t.is(rules.split('\n').filter((l) => l.includes('0x15008')).length, 1, 'one rule after two installs');
      for (const [host, client] of [
        ['10.99.0.1', '10.99.0.7'],
        ['fd99::1', 'fd99::7'],
      ] as const) {
        const port = await peerServer(host);
        const got = await answer(connector.connect(pod, host, port, client));
        t.deepEqual(JSON.parse(got), { peer: client, mark: REPLY_MARK }, `${host}: ${got}`);
      }
      const port = await peerServer('10.99.0.1');
      const mismatch = await answer(connector.connect(pod, '10.99.0.1', port, 'fd99::7'));
      t.deepEqual(JSON.parse(mismatch), { peer: '10.99.0.1', mark: 0 }, 'another family falls back');
      const text = await connector.connections.get();
      const count = (result: string, reason: string) =>
        text.values.find((v) => v.labels.result === result && v.labels.reason === reason)?.value ?? 0;
      t.is(count('preserved', '-'), 2);
      t.is(count('fallback', 'family_mismatch'), 1);

      // Without steering a spoofed source would send the app's replies away: never tried.
      await steering.remove();
      t.notRegex(execFileSync('ip', ['-n', NETNS, 'rule', 'show'], { encoding: 'utf8' }), /0x15008/);
      const after = await answer(connector.connect(pod, '10.99.0.1', port, '10.99.0.7'));
      t.deepEqual(JSON.parse(after), { peer: '10.99.0.1', mark: 0 }, 'falls back to the pod address');
      t.is(
        (await connector.connections.get()).values.find((v) => v.labels.reason === 'no_reply_steering')
          ?.value,
        1,
      );
    } finally {
      await steering.remove();
      netns.close();
    }
  },
);
