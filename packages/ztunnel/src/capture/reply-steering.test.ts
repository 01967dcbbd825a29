import { execFileSync } from 'node:child_process';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import { MeshMetrics } from '@zmesh/shared';
import test, { type ExecutionContext } from 'ava';
import { fdOf } from './bpf-capture.js';
import { listenInNetns, NetnsHandle } from './netns-listener.js';
import {
  REPLY_MARK,
  ReplySteering,
  routeMessage,
  ruleMessage,
  type SteeringChange,
} from './reply-steering.js';
import * as sys from './sys.js';
import { TransparentConnector } from './transparent-connect.js';

/** A fake rtnetlink change that records each call and answers from a script (default: success). */
function fakeChange(answer: (family: 4 | 6, op: 'add' | 'del') => string | undefined = () => undefined) {
  const calls: Array<{ family: 4 | 6; op: 'add' | 'del' }> = [];
  const change: SteeringChange = (_netns, family, op) => {
    calls.push({ family, op });
    return answer(family, op);
  };
  return { change, calls };
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

test('install steers both families and turns tcp_fwmark_accept on; remove undoes both', (t) => {
  const nl = fakeChange();
  const sysctl = fakeSysctl('0');
  const s = new ReplySteering({
    netns: '/x',
    pod: 'p',
    change: nl.change,
    fwmarkAccept: sysctl.fwmarkAccept,
  });
  t.deepEqual(s.install(), { 4: undefined, 6: undefined });
  t.is(sysctl.state.value, '1');
  s.remove();
  t.deepEqual(nl.calls, [
    { family: 4, op: 'add' },
    { family: 6, op: 'add' },
    { family: 4, op: 'del' },
    { family: 6, op: 'del' },
  ]);
  t.is(sysctl.state.value, '0', 'the pod gets its tcp_fwmark_accept back');
  t.truthy(s.unavailable(4), 'after removal no transparent connect is allowed');
});

test('a tcp_fwmark_accept already on is never written nor restored', (t) => {
  const sysctl = fakeSysctl('1');
  const s = new ReplySteering({
    netns: '/x',
    pod: 'p',
    change: fakeChange().change,
    fwmarkAccept: sysctl.fwmarkAccept,
  });
  s.install();
  s.remove();
  t.deepEqual(sysctl.state.writes, []);
});

test('a family whose steering fails is reported with the reason, and only that family', (t) => {
  const nl = fakeChange((family) => (family === 6 ? 'route add (IPv6): EAFNOSUPPORT' : undefined));
  const s = new ReplySteering({
    netns: '/x',
    pod: 'p',
    change: nl.change,
    fwmarkAccept: fakeSysctl('0').fwmarkAccept,
  });
  const status = s.install();
  t.is(status[4], undefined);
  t.is(status[6], 'route add (IPv6): EAFNOSUPPORT');
  t.is(s.unavailable(6), 'route add (IPv6): EAFNOSUPPORT');
});

test('without tcp_fwmark_accept no family is steered (replies would not carry the mark)', (t) => {
  const nl = fakeChange();
  const s = new ReplySteering({
    netns: '/x',
    pod: 'p',
    change: nl.change,
    fwmarkAccept: {
      get: () => {
        throw new Error('EACCES');
      },
      set: () => {},
    },
  });
  const status = s.install();
  t.regex(status[4] ?? '', /tcp_fwmark_accept/);
  t.regex(status[6] ?? '', /tcp_fwmark_accept/);
  t.is(nl.calls.length, 0);
});

test('rtnetlink messages: the rule and the route ip(8) would send', (t) => {
  const rule = ruleMessage(4, 'add');
  t.is(rule.readUInt32LE(0), rule.length, 'nlmsg_len');
  t.is(rule.readUInt16LE(4), 32, 'RTM_NEWRULE');
  t.is(rule.readUInt16LE(6), 0x1 | 0x4 | 0x400 | 0x200, 'request, ack, create, excl');
  t.is(rule.readUInt8(16), 2, 'AF_INET');
  t.is(rule.readUInt8(16 + 7), 1, 'FR_ACT_TO_TBL');
  t.deepEqual(
    [0, 1, 2].map((i) => [rule.readUInt16LE(28 + 8 * i + 2), rule.readUInt32LE(28 + 8 * i + 4)]),
    [
      [6, 15008],
      [10, REPLY_MARK],
      [15, 15008],
    ],
    'priority, fwmark, table',
  );
  t.is(ruleMessage(6, 'del').readUInt16LE(4), 33, 'RTM_DELRULE');
  t.is(ruleMessage(6, 'del').readUInt8(16), 10, 'AF_INET6');
  const route = routeMessage(6, 'add');
  t.is(route.readUInt16LE(4), 24, 'RTM_NEWROUTE');
  t.is(route.readUInt16LE(6), 0x1 | 0x4 | 0x400 | 0x100, 'request, ack, create, replace');
  t.deepEqual(
    [...route.subarray(16, 24)],
    [10, 0, 0, 0, 0, 3, 254, 2],
    'inet6 default, boot, host scope, local',
  );
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
    const steering = new ReplySteering({ netns, pod: 'p' });
    const connector = new TransparentConnector(new MeshMetrics({ defaultMetrics: false }).registry);
    const pod = { uid: 'p', netns, steering };
    try {
      t.deepEqual(steering.install(), { 4: undefined, 6: undefined });
      t.deepEqual(steering.install(), { 4: undefined, 6: undefined }, 'idempotent');
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
      steering.remove();
      t.notRegex(execFileSync('ip', ['-n', NETNS, 'rule', 'show'], { encoding: 'utf8' }), /0x15008/);
      const after = await answer(connector.connect(pod, '10.99.0.1', port, '10.99.0.7'));
      t.deepEqual(JSON.parse(after), { peer: '10.99.0.1', mark: 0 }, 'falls back to the pod address');
      t.is(
        (await connector.connections.get()).values.find((v) => v.labels.reason === 'no_reply_steering')
          ?.value,
        1,
      );
    } finally {
      steering.remove();
      netns.close();
    }
  },
);
