import test from 'ava';
import { StreamIds } from './stream-ids.js';

test('a client opens odd ids in order; the server side sees those as the peer’s', (t) => {
  const client = new StreamIds('client');
  t.deepEqual([client.allocate(), client.allocate(), client.allocate()], [1, 3, 5]);
  t.false(client.isPeers(3));
  t.true(client.isPeers(2));
  const server = new StreamIds('server');
  t.true(server.isPeers(1));
  t.false(server.isPeers(2));
});

test('idle is an id its opener has not used yet, on either side', (t) => {
  const ids = new StreamIds('server');
  t.true(ids.isIdle(1));
  ids.peerOpened(7);
  t.is(ids.lastPeer, 7);
  t.false(ids.isIdle(1), 'a skipped lower id is closed, not idle (RFC 9113 §5.1.1)');
  t.false(ids.isIdle(7));
  t.true(ids.isIdle(9));
  t.true(ids.isIdle(2), 'we never opened an even id');
  const client = new StreamIds('client');
  client.allocate();
  t.false(client.isIdle(1));
  t.true(client.isIdle(3));
});
