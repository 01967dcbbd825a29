import test from 'ava';
import { catalogue } from './catalogue.js';

test('the catalogue: ≥ 25 attempts, unique ids, each described, covering every area the issue names', (t) => {
  const all = catalogue();
  t.true(all.length >= 25, `${all.length} attempts`);
  t.is(new Set(all.map((a) => a.id)).size, all.length, 'ids are unique');
  for (const a of all) t.true(a.description.length > 10, a.id);
  const ids = all.map((a) => a.id).join(' ');
  for (const area of [
    'direct-tcp/',
    'udp/',
    '15008',
    '15006',
    'hbone/',
    'waypoint/',
    'admin-15000',
    'node-agent',
    'lifecycle/',
    'process/',
    'loop/',
  ])
    t.true(ids.includes(area), area);
  for (const family of ['ipv4', 'ipv6', 'ipv4-mapped']) t.true(ids.includes(`/${family}`), family);
});

test('lifecycle attempts (enrollment, restarts) run last: they disturb the others', (t) => {
  const ids = catalogue().map((a) => a.id);
  const first = ids.findIndex((id) => id.startsWith('lifecycle/'));
  t.true(ids.slice(first).every((id) => id.startsWith('lifecycle/')));
});
