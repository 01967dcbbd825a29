import { execFileSync } from 'node:child_process';
import { readdirSync, readlinkSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { fdOf } from './bpf-capture.js';
import { connectInNetns, inNetns, listenInNetns, NetnsHandle, netnsCookieOf } from './netns-listener.js';
import * as sys from './sys.js';

/*
 * A scratch namespace of our own. Its prefix is not the cluster's `zm-`, so a cluster's
 * stale cleanup running in a parallel test process never takes it for a leftover.
 */
const NETNS = `zmtest-${process.pid}`;
const NETNS_PATH = `/run/netns/${NETNS}`;
const isRoot = process.getuid?.() === 0;

function rootTest(title: string, fn: (t: ExecutionContext) => Promise<void> | void): void {
  if (isRoot) test.serial(title, fn);
  else test.serial.skip(`${title} [skipped: needs root for setns]`, fn);
}

test.before(() => {
  if (!isRoot) return;
  execFileSync('ip', ['netns', 'add', NETNS]);
  execFileSync('ip', ['-n', NETNS, 'link', 'set', 'lo', 'up']);
});

test.after.always(() => {
  if (isRoot) execFileSync('ip', ['netns', 'del', NETNS]);
});

/**
 * Reads a socket to its end, then closes it. connectInNetns's sockets allow half-open, and
 * since Node 22 a for-await that reaches the end no longer destroys such a socket: its
 * write side stayed open, the server's socket waited for it, and the test process did not exit.
 */
async function readAll(socket: Socket): Promise<string> {
  let data = '';
  try {
    for await (const chunk of socket) data += chunk;
  } finally {
    socket.destroy();
  }
  return data;
}

const netnsOfThread = (task: string) => readlinkSync(`/proc/self/task/${task}/ns/net`);

rootTest('setns moves only the main thread, and only for the callback', (t) => {
  const home = readlinkSync('/proc/thread-self/ns/net');
  const tasks = readdirSync('/proc/self/task');
  t.true(tasks.length > 1, 'node runs helper threads');
  const during = inNetns(NETNS_PATH, () => tasks.map((task) => [task, netnsOfThread(task)] as const));
  const main = String(process.pid);
  for (const [task, ns] of during) {
    if (task === main) t.not(ns, home, 'main thread is in the pod namespace');
    else t.is(ns, home, `thread ${task} stays home`);
  }
  for (const task of readdirSync('/proc/self/task')) t.is(netnsOfThread(task), home);
});

rootTest('the thread returns home when the callback throws', (t) => {
  const home = readlinkSync('/proc/thread-self/ns/net');
  t.throws(() =>
    inNetns(NETNS_PATH, () => {
      throw new Error('inside');
    }),
  );
  t.is(readlinkSync('/proc/thread-self/ns/net'), home);
  const e = t.throws(() => listenInNetns(NETNS_PATH, '192.0.2.1', 15001));
  t.is((e as sys.SysError).code, 'EADDRNOTAVAIL');
  t.is(readlinkSync('/proc/thread-self/ns/net'), home);
});

rootTest('a send-buffer bound reaches accepted sockets and connects made in the netns', async (t) => {
  const bytes = 256 * 1024;
  const fd = listenInNetns(NETNS_PATH, '127.0.0.1', 15002, { sendBufferBytes: bytes });
  const server: Server = createServer((s) => s.end());
  const accepted = new Promise<number>((resolve) => {
    server.once('connection', (s) => resolve(sys.sendBuffer(fdOf(s))));
  });
  await new Promise<void>((resolve) => server.listen({ fd }, resolve));
  try {
    const socket = connectInNetns(NETNS_PATH, '127.0.0.1', 15002, { sendBufferBytes: bytes });
    await new Promise((resolve) => socket.once('connect', resolve));
    const own = sys.sendBuffer(fdOf(socket));
    // Linux doubles SO_SNDBUF for its bookkeeping; autotuned sockets start at 16 KiB here.
    t.is(await accepted, 2 * bytes);
    t.is(own, 2 * bytes);
    socket.destroy();
  } finally {
    server.close();
  }
});

rootTest('a listener made in a netns serves Node, and is reachable only from that netns', async (t) => {
  const fd = listenInNetns(NETNS_PATH, '127.0.0.1', 15001);
  t.is(sys.netnsCookie(fd), netnsCookieOf(NETNS_PATH));
  const server: Server = createServer((s) => s.end('in-netns'));
  await new Promise<void>((resolve) => server.listen({ fd }, resolve));
  try {
    t.is(await readAll(connectInNetns(NETNS_PATH, '127.0.0.1', 15001)), 'in-netns');
    const home = createConnection(15001, '127.0.0.1');
    const err = await new Promise<NodeJS.ErrnoException | undefined>((resolve) => {
      home.once('error', resolve);
      home.once('connect', () => resolve(undefined));
    });
    home.destroy();
    t.is(err?.code, 'ECONNREFUSED', 'the host namespace has no such listener');
  } finally {
    server.close();
  }
});

rootTest('IPv6 loopback listeners work too', async (t) => {
  const fd = listenInNetns(NETNS_PATH, '::1', 15001);
  const server = createServer((s) => s.end(`${s.remoteAddress}`));
  await new Promise<void>((resolve) => server.listen({ fd }, resolve));
  try {
    t.is(await readAll(connectInNetns(NETNS_PATH, '::1', 15001)), '::1');
  } finally {
    server.close();
  }
});

rootTest('a held namespace handle serves connects like its path; once closed it refuses', async (t) => {
  const handle = new NetnsHandle(NETNS_PATH);
  const fd = listenInNetns(handle, '127.0.0.1', 15002);
  const server = createServer((s) => s.end('held'));
  await new Promise<void>((resolve) => server.listen({ fd }, resolve));
  try {
    t.is(await readAll(connectInNetns(handle, '127.0.0.1', 15002)), 'held');
    const home = readlinkSync('/proc/thread-self/ns/net');
    handle.close();
    handle.close(); // idempotent
    t.throws(() => connectInNetns(handle, '127.0.0.1', 15002), { message: /closed \(pod removed\)/ });
    t.is(readlinkSync('/proc/thread-self/ns/net'), home, 'never left home');
  } finally {
    server.close();
  }
});

rootTest('two listeners bind the same pod address and port (SO_REUSEPORT: an upgrade overlap)', async (t) => {
  const servers: Server[] = [];
  t.teardown(() => {
    for (const s of servers) s.close();
  });
  const accepted = [0, 0];
  for (const i of [0, 1]) {
    const fd = listenInNetns(NETNS_PATH, '127.0.0.1', 15001);
    const server = createServer((s) => {
      accepted[i]! += 1;
      s.end('x');
    });
    await new Promise<void>((resolve) => server.listen({ fd }, resolve));
    servers.push(server);
  }
  const connectOnce = () => readAll(connectInNetns(NETNS_PATH, '127.0.0.1', 15001));
  for (let i = 0; i < 40; i++) t.is(await connectOnce(), 'x');
  t.true(accepted[0]! > 0 && accepted[1]! > 0, `both listeners accepted: ${accepted.join(', ')}`);
  // The first one closing (a drain) leaves the second serving every connect.
  await new Promise((resolve) => servers[0]!.close(resolve));
  const before = accepted[1]!;
  for (let i = 0; i < 10; i++) t.is(await connectOnce(), 'x');
  t.is(accepted[1]! - before, 10);
});
