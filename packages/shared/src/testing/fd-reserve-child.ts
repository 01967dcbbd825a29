import { createInterface } from 'node:readline';
import { PassThrough } from 'node:stream';
import { PreauthLimiter } from '../hbone/admission.js';
import { HboneServer } from '../hbone/hbone-server.js';
import type { Credential } from '../identity/credential.js';
import { TrustBundle } from '../identity/trust-bundle.js';
import { MeshMetrics } from '../metrics/index.js';
import { FdReserve, openFdCount } from '../runtime/fd-reserve.js';
import { metricValue } from './transport-fixtures.js';

/**
 * An HBONE server alone in a process, for the fd-reserve test: started under a low
 * RLIMIT_NOFILE (prlimit), it must keep serving and never exit while idlers pile up.
 * Input: ZMESH_FD_CHILD = { server: Credential, rootPem, trustDomain, reserve }. Prints
 * { port } once listening; answers each stdin line with its fd count and refusal metrics.
 */
const input = JSON.parse(process.env.ZMESH_FD_CHILD ?? '{}') as {
  server: Credential;
  rootPem: string;
  trustDomain: string;
  reserve: number;
};
const bundle = new TrustBundle(input.trustDomain, [input.rootPem]);
const metrics = new MeshMetrics({ defaultMetrics: false });
const server = new HboneServer({
  credential: input.server,
  bundle,
  metrics,
  handshakeTimeoutMs: 60_000,
  // Only the fd reserve may refuse here: the pre-auth bounds are out of the way.
  preauth: new PreauthLimiter({ perSource: 100_000, total: 100_000 }),
  gate: new FdReserve({ reserve: input.reserve }),
  onTunnel: async () => ({ upstream: new PassThrough() }),
});
const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`${JSON.stringify({ port })}\n`);
for await (const _line of createInterface({ input: process.stdin })) {
  const refused = await metricValue(metrics, 'zmesh_hbone_refused_connections_total', {
    reason: 'fd_reserve',
  });
  const errors = await metricValue(metrics, 'zmesh_errors_total', { code: 'ZM_ERR_FD_RESERVE' });
  process.stdout.write(`${JSON.stringify({ fds: openFdCount(), refused, errors })}\n`);
}
await server.close();
