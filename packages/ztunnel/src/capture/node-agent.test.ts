import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ZmeshError } from '@zmesh/shared';
import test from 'ava';
import { type AddWorkloadRequest, type NodeAgentHandler, NodeAgentServer } from './node-agent.js';
import { NodeAgentClient } from './node-agent-client.js';

class RecordingHandler implements NodeAgentHandler {
  readonly calls: unknown[] = [];
  async addWorkload(req: AddWorkloadRequest): Promise<void> {
    if (req.uid === 'broken')
      throw new ZmeshError('ZM_ERR_CAPTURE_ATTACH', { pod: req.uid, reason: 'no cgroup' });
    if (req.uid === 'crash') throw new TypeError('boom');
    this.calls.push(['add', req]);
  }
  async delWorkload(uid: string): Promise<void> {
    this.calls.push(['del', uid]);
  }
  async snapshot(uids: string[]): Promise<void> {
    this.calls.push(['snapshot', uids]);
  }
}

async function start(t: { teardown: (fn: () => unknown) => void }) {
  const dir = mkdtempSync(join(tmpdir(), 'zm-agent-'));
  const path = join(dir, 'agent.sock');
  const handler = new RecordingHandler();
  const uid = process.getuid?.() ?? 0;
  const server = new NodeAgentServer(handler, { path, allowedUids: [uid] });
  await server.listen();
  const client = new NodeAgentClient(path, { timeoutMs: 5000 });
  t.teardown(async () => {
    client.close();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { path, handler, client };
}

test('the socket is created mode 0600', async (t) => {
  const { path } = await start(t);
  t.is(statSync(path).mode & 0o777, 0o600);
});

test('AddWorkload, DelWorkload and Snapshot reach the handler in order and are acknowledged', async (t) => {
  const { handler, client } = await start(t);
  await client.addWorkload({ uid: 'u1', netns: '/run/netns/x', cgroup: '/sys/fs/cgroup/x' });
  await client.snapshot(['u1']);
  await client.delWorkload('u1');
  t.deepEqual(handler.calls, [
    ['add', { uid: 'u1', netns: '/run/netns/x', cgroup: '/sys/fs/cgroup/x' }],
    ['snapshot', ['u1']],
    ['del', 'u1'],
  ]);
});

test('bad input gets an error reply and the connection keeps working', async (t) => {
  const { client } = await start(t);
  t.like(await client.raw('{not json'), { ok: false, code: 'ZM_ERR_AGENT_BAD_REQUEST' });
  t.like(await client.raw('{"op":"Reboot","id":7}'), { ok: false, id: 7, code: 'ZM_ERR_AGENT_BAD_REQUEST' });
  const missing = await client.raw('{"op":"AddWorkload","uid":"u"}');
  t.like(missing, { ok: false, code: 'ZM_ERR_AGENT_BAD_REQUEST' });
  t.regex(missing.ok ? '' : missing.error, /netns.*cgroup/);
  t.like(await client.raw('[1,2]'), { ok: false });
  t.like(await client.raw('{"op":"Snapshot","uids":[1]}'), { ok: false });
  t.like(await client.raw(`{"op":"DelWorkload","uid":"${'x'.repeat(100_000)}"}`), { ok: false });
  t.like(await client.raw('{"op":"DelWorkload","uid":"u","id":"abc"}'), { ok: true, id: 'abc' });
});

test('handler failures become error replies with their code', async (t) => {
  const { client } = await start(t);
  const e = await t.throwsAsync(client.addWorkload({ uid: 'broken', netns: '/n', cgroup: '/c' }));
  t.is((e as ZmeshError).code, 'ZM_ERR_CAPTURE_ATTACH');
  t.like(await client.raw('{"op":"AddWorkload","uid":"crash","netns":"/n","cgroup":"/c"}'), {
    ok: false,
    code: 'ZM_ERR_INTERNAL_FAULT',
  });
  await t.notThrowsAsync(client.delWorkload('still-fine'));
});

test('pipelined requests are answered in order', async (t) => {
  const { path } = await start(t);
  const socket = createConnection(path);
  const lines = ['{"op":"DelWorkload","uid":"a","id":1}', 'junk', '{"op":"DelWorkload","uid":"b","id":3}'];
  socket.end(`${lines.join('\n')}\n`);
  let out = '';
  for await (const chunk of socket) out += chunk;
  const replies = out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { ok: boolean; id?: number });
  t.deepEqual(
    replies.map((r) => [r.ok, r.id]),
    [
      [true, 1],
      [false, undefined],
      [true, 3],
    ],
  );
});

test('peers with a uid not allowed are disconnected', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'zm-agent-'));
  const path = join(dir, 'agent.sock');
  const server = new NodeAgentServer(new RecordingHandler(), { path, allowedUids: [4242] });
  await server.listen();
  t.teardown(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const client = new NodeAgentClient(path, { timeoutMs: 2000 });
  await t.throwsAsync(client.delWorkload('x'));
  client.close();
});
