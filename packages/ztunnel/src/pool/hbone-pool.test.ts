import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import type { HboneSession } from '@zmesh/shared';
import test from 'ava';
import { HbonePool, type PoolKey } from './hbone-pool.js';

/** A stand-in session that counts tunnels; the real HBONE path is covered in test/ztunnel-pair. */
class CountingSession extends EventEmitter {
  closed = false;
  draining = false;
  opened = 0;
  async openTunnel() {
    this.opened += 1;
    return new PassThrough();
  }
  close() {
    if (this.closed) return;
    this.closed = true;
    this.emit('close');
  }
}

const key: PoolKey = {
  tenant: 't',
  sourceIdentity: 'a',
  destinationIdentity: 'b',
  destinationAddress: '127.0.0.1:15008',
};

function pool(opts: { idleTimeoutMs?: number; max?: number } = {}) {
  const sessions: CountingSession[] = [];
  const p = new HbonePool({
    idleTimeoutMs: opts.idleTimeoutMs ?? 60_000,
    maxStreamsPerConnection: opts.max ?? 100,
    connect: async () => {
      await new Promise((r) => setTimeout(r, 5));
      const s = new CountingSession();
      sessions.push(s);
      return s as unknown as HboneSession;
    },
  });
  return { p, sessions };
}

for (const n of [1, 99, 100, 101, 250]) {
  test(`a burst of ${n} streams opens exactly ceil(${n}/100) connections`, async (t) => {
    const { p, sessions } = pool();
    await Promise.all(Array.from({ length: n }, () => p.openTunnel(key, { authority: '127.0.0.1:80' })));
    t.is(sessions.length, Math.ceil(n / 100));
    t.true(sessions.every((s) => s.opened <= 100));
    p.close();
  });
}

test('keys that differ in any field never share a connection', async (t) => {
  const { p, sessions } = pool();
  for (const k of [
    key,
    { ...key, tenant: 'u' },
    { ...key, sourceIdentity: 'x' },
    { ...key, destinationIdentity: 'y' },
    { ...key, destinationAddress: 'z' },
  ]) {
    await p.openTunnel(k, { authority: '127.0.0.1:80' });
  }
  t.is(sessions.length, 5);
  p.close();
});

test('an idle connection is evicted after the configured time, a busy one is not', async (t) => {
  const { p, sessions } = pool({ idleTimeoutMs: 50 });
  const busy = await p.openTunnel({ ...key, tenant: 'busy' }, { authority: '127.0.0.1:80' });
  const idle = await p.openTunnel(key, { authority: '127.0.0.1:80' });
  idle.destroy();
  await new Promise((r) => setTimeout(r, 150));
  t.true(sessions[1]!.closed, 'idle connection closed');
  t.false(sessions[0]!.closed, 'busy connection kept');
  t.is(p.connectionCount(), 1);
  busy.destroy();
  p.close();
});

test('a failed connect fails every stream waiting on it and leaves nothing behind', async (t) => {
  const p = new HbonePool({ connect: async () => Promise.reject(new Error('refused')) });
  const results = await Promise.allSettled(
    Array.from({ length: 5 }, () => p.openTunnel(key, { authority: 'x:1' })),
  );
  t.true(results.every((r) => r.status === 'rejected'));
  t.is(p.connectionCount(), 0);
});

test('a stream refused unprocessed after GOAWAY is retried once on a new connection', async (t) => {
  const { ZmeshError } = await import('@zmesh/shared');
  let connects = 0;
  const p = new HbonePool({
    connect: async () => {
      connects += 1;
      const s = new CountingSession();
      if (connects === 1) {
        s.openTunnel = async () => {
          throw new ZmeshError('ZM_ERR_HBONE_SESSION', { address: 'x', reason: 'refused', rstCode: 7 });
        };
      }
      return s as unknown as HboneSession;
    },
  });
  const tunnel = await p.openTunnel(key, { authority: '127.0.0.1:80' });
  t.truthy(tunnel);
  t.is(connects, 2);
  p.close();
});

test('drainSource closes only that identity’s connections; the next stream opens a fresh one', async (t) => {
  const { p, sessions } = pool();
  const other = { ...key, sourceIdentity: 'other' };
  const open = await p.openTunnel(key, { authority: '127.0.0.1:80' });
  await p.openTunnel(other, { authority: '127.0.0.1:80' });
  t.is(p.drainSource('a'), 1);
  t.true(sessions[0]!.closed, 'GOAWAY-style close: the open tunnel is left to finish');
  t.false(sessions[1]!.closed);
  t.false(open.destroyed);
  await p.openTunnel(key, { authority: '127.0.0.1:80' });
  t.is(sessions.length, 3);
  p.close();
});
