import { execa } from 'execa';
import { startL7Lab } from './l7-lab.js';

const SPLIT_REQUESTS = 200;
/** The demo's addresses: l7-lab's default block, 127.50.0.0/16. */
const FRONTEND = '127.50.1.1';
const WAYPOINT = '127.50.3.1';

/**
 * `make demo`, part 2: L7 for one namespace, live. A real control plane, two ztunnels and a
 * waypoint, all fed over xDS; the waypoint's routes and policy are the control plane's YAML.
 * `zmesh ns l7 on shop` sends the namespace's traffic through the waypoint (GET /public
 * allowed, POST /admin denied with 403, a 90/10 split of /public between v1 and v2), and
 * `ns l7 off` takes it back out, without restarting anything. Explicit-proxy mode on
 * loopback, so it needs no root.
 */
export async function runL7Demo(): Promise<number> {
  step(
    'control plane (xDS + CA on loopback) with namespaces front and shop, web-v1/web-v2, a waypoint Gateway; the waypoint takes its HTTPRoute and policy from the control plane',
  );
  const lab = await startL7Lab();
  try {
    step('L7 off: front/frontend → web.shop (L4 only, through ztunnels)');
    const before = await requests();
    console.log(`  GET /public → ${before.get}; POST /admin → ${before.post} (no L7 policy applies)`);
    step('zmesh ns l7 on shop: returns when every proxy (ztunnels and the waypoint) has acked');
    console.log(`  ${(await lab.l7(true)).trim()}`);
    const on = await requests();
    console.log(`  GET /public → ${on.get}; POST /admin → ${on.post}`);
    const split = await splitCount();
    console.log(`  ${SPLIT_REQUESTS} × GET /public: v1 ${split.v1}, v2 ${split.v2} (route: 90/10)`);
    for (const line of (await (await fetch(`http://${WAYPOINT}:15020/metrics`)).text()).split('\n')) {
      if (line.startsWith('istio_requests_total{')) console.log(`  ${summarise(line)}`);
    }
    step('zmesh ns l7 off shop: new connections skip the waypoint again');
    console.log(`  ${(await lab.l7(false)).trim()}`);
    const off = await requests();
    console.log(`  GET /public → ${off.get}; POST /admin → ${off.post}`);
    const ok =
      before.post.startsWith('200') &&
      on.get.startsWith('200') &&
      on.post.startsWith('403') &&
      Math.abs(split.v1 / SPLIT_REQUESTS - 0.9) <= 0.07 &&
      off.post.startsWith('200');
    step(ok ? 'L7 demo passed: policy and routing applied and removed live' : 'L7 demo FAILED');
    return ok ? 0 : 1;
  } finally {
    await lab.stop();
  }
}

async function curl(method: string, path: string): Promise<string> {
  const r = await execa(
    'curl',
    [
      '-sS',
      '--max-time',
      '5',
      '-X',
      method,
      '-o',
      '-',
      '-w',
      ' [%{http_code}]',
      `http://${FRONTEND}:18080${path}`,
    ],
    { reject: false },
  );
  const code = /\[(\d{3})\]$/.exec(r.stdout)?.[1] ?? '000';
  const body = r.stdout
    .replace(/\s*\[\d{3}\]$/, '')
    .replace(/\.+$/, '')
    .trim();
  return `${code} ${body || r.stderr.trim()}`;
}

async function requests(): Promise<{ get: string; post: string }> {
  return { get: await curl('GET', '/public'), post: await curl('POST', '/admin') };
}

async function splitCount(): Promise<{ v1: number; v2: number }> {
  const counts = { v1: 0, v2: 0 };
  for (let i = 0; i < SPLIT_REQUESTS; i++) {
    const r = await curl('GET', '/public');
    if (r.includes(' v1 ')) counts.v1++;
    else if (r.includes(' v2 ')) counts.v2++;
  }
  return counts;
}

function summarise(line: string): string {
  const label = (k: string) => new RegExp(`${k}="([^"]*)"`).exec(line)?.[1];
  return `istio_requests_total ${label('destination_service') ?? label('destination_workload')} ${label('request_method') ?? ''} ${label('response_code')} [${label('response_flags')}] = ${line.split(' ').pop()}`;
}

function step(text: string): void {
  console.log(`\n▶ ${text}`);
}
