/**
 * Tiny Node programs run inside pods by the cluster tests (as `node -e`), so the tests
 * need nothing but node in a pod.
 */

/** Listens on [::]:port (dual stack) and answers each connection with `pong` and closes. */
export const ECHO_SERVER = `
const port = Number(process.argv[1]);
require('net').createServer((s) => s.end('pong')).listen(port, '::', () => console.log('listening'));
`;

/**
 * Connects to each host in turn on one port and prints one JSON line per attempt:
 * { host, ok, peer (what getpeername said), data, err }. Gives up on one after timeoutMs.
 */
export const PROBE_CLIENT = `
const net = require('net');
const [hostsJson, port, timeoutMs] = process.argv.slice(1);
(async () => {
  for (const host of JSON.parse(hostsJson)) {
    const line = await new Promise((resolve) => {
      const r = { host, ok: false, peer: null, data: '', err: null };
      const s = net.connect(Number(port), host);
      const timer = setTimeout(() => { r.err = 'TIMEOUT'; s.destroy(); resolve(r); }, Number(timeoutMs));
      s.on('connect', () => { r.ok = true; r.peer = { address: s.remoteAddress, port: s.remotePort }; });
      s.on('data', (d) => { r.data += d; });
      s.on('close', () => { clearTimeout(timer); resolve(r); });
      s.on('error', (e) => { r.err = e.code; });
    });
    console.log(JSON.stringify(line));
  }
})();
`;

export interface ProbeResult {
  host: string;
  ok: boolean;
  peer: { address: string; port: number } | null;
  data: string;
  err: string | null;
}

export function parseProbe(stdout: string): ProbeResult[] {
  return stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as ProbeResult);
}
