import test from 'ava';
import type { PodInfo } from '../cluster/topology.js';
import { describeTargetEvents, TargetWitness } from './target-witness.js';

const server = { name: 'server', ipv4: '10.244.2.2', ipv6: 'fd00:244:2::2' } as PodInfo;

test('a TCP peer from outside the target pod came around the mesh; its own address or loopback did not', (t) => {
  const w = new TargetWitness(new Map([['server', server]]));
  w.add('server', '{"listening":8080}\n{"tcp":"::ffff:10.244.2.2"}\n{"tcp":"::ffff:10.2');
  w.mark();
  w.add('server', '44.1.2"}\n{"udp":"fd00:244:1::2"}\n{"tcp":"::1"}\n');
  const seen = w.sinceMark();
  t.deepEqual(
    seen.map((e) => [e.kind, e.peer, w.cameAround(e)]),
    [
      ['tcp', '::ffff:10.244.1.2', true],
      ['udp', 'fd00:244:1::2', false],
      ['tcp', '::1', false],
    ],
    'a line split across chunks is joined; only events after the mark count',
  );
  t.regex(describeTargetEvents(w, seen)[0]!, /from outside its pod/);
  t.deepEqual(describeTargetEvents(w, []), [
    'targets saw nothing (no connection, no datagram reached an application)',
  ]);
});

test("a peer with the client's address came through ztunnel only when its socket carries ztunnel's mark", (t) => {
  const w = new TargetWitness(new Map([['server', server]]));
  w.add(
    'server',
    [
      '{"tcp":"::ffff:10.244.1.2","mark":86024}',
      '{"tcp":"::ffff:10.244.1.2","mark":0}',
      '{"tcp":"fd00:244:1::2","mark":null}',
      '{"tcp":"fd00:244:1::2","mark":"0x15008"}',
      '{"tcp":"::ffff:10.244.2.2","mark":0}',
      '',
    ].join('\n'),
  );
  t.deepEqual(
    w.sinceMark().map((e) => [e.peer, e.mark, w.cameAround(e)]),
    [
      ['::ffff:10.244.1.2', 0x15008, false],
      ['::ffff:10.244.1.2', 0, true],
      ['fd00:244:1::2', null, true],
      ['fd00:244:1::2', null, true],
      ['::ffff:10.244.2.2', 0, false],
    ],
    'an unreadable or malformed mark never excuses a peer from outside the pod',
  );
});
