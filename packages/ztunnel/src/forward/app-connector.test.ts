import { createServer } from 'node:net';
import type { Workload } from '@zmesh/shared';
import test from 'ava';
import { Registry } from 'prom-client';
import { localSourceAppConnector, sourceAddressCounter } from './app-connector.js';

/** A loopback app answering with the peer address it saw; the connector under test. */
async function setup(t: import('ava').ExecutionContext) {
  const app = createServer((s) => {
    s.on('error', () => {});
    s.end(String(s.remoteAddress));
  });
  await new Promise<void>((r) => app.listen({ host: '127.31.7.1', port: 0 }, r));
  t.teardown(() => app.close());
  const registry = new Registry();
  const connectApp = localSourceAppConnector(sourceAddressCounter(registry));
  const port = (app.address() as { port: number }).port;
  const peerSeen = async (source: string | undefined) => {
    const s = await connectApp({} as Workload, '127.31.7.1', port, source);
    let text = '';
    for await (const chunk of s) text += String(chunk);
    s.destroy(); // half-open (allowHalfOpen) after the app's end: nothing else closes it
    return text;
  };
  const counted = async () =>
    (await registry.metrics())
      .split('\n')
      .filter((l) => l.startsWith('zmesh_inbound_source_address_total{'))
      .map((l) => l.replace('zmesh_inbound_source_address_total', ''));
  return { peerSeen, counted };
}

test('explicit mode: a source that is an address of this host is the app peer', async (t) => {
  const { peerSeen, counted } = await setup(t);
  t.is(await peerSeen('127.31.7.9'), '127.31.7.9');
  t.deepEqual(await counted(), ['{result="preserved",reason="-"} 1']);
});

test('explicit mode: a source elsewhere, of the other family or none falls back, each counted by reason', async (t) => {
  const { peerSeen, counted } = await setup(t);
  // 192.0.2.1 is not on this host: the bind fails (EADDRNOTAVAIL) before any packet is sent.
  t.is(await peerSeen('192.0.2.1'), '127.0.0.1', "the kernel's choice");
  t.is(await peerSeen('fd00::1'), '127.0.0.1');
  t.is(await peerSeen(undefined), '127.0.0.1');
  t.deepEqual((await counted()).sort(), [
    '{result="fallback",reason="family_mismatch"} 1',
    '{result="fallback",reason="no_source"} 1',
    '{result="fallback",reason="not_local"} 1',
  ]);
});
