import * as http from 'node:http';
import * as https from 'node:https';
import { canonicalIp, jwksHostKind } from '@zmesh/shared';

/** The most a JWKS document may be; a bigger answer is a failed fetch, not a truncated key set. */
export const JWKS_MAX_BYTES = 64 * 1024;

/**
 * A `fetch` for jose's remote key set, limited to what jwksUriRefusal allows: a service name
 * is resolved to its address through the waypoint's config (`resolve`), never DNS; at most
 * `maxBytes` are read; no redirect is followed; the signal (jose's timeout) aborts it.
 */
export function meshFetch(
  resolve: (hostname: string) => string | undefined,
  maxBytes = JWKS_MAX_BYTES,
): (url: string, init: { signal?: AbortSignal }) => Promise<Response> {
  return (uri, init) =>
    new Promise<Response>((done, fail) => {
      const url = new URL(uri);
      const kind = jwksHostKind(url.hostname);
      const bare = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
      const address =
        kind === 'loopback'
          ? bare === 'localhost'
            ? '127.0.0.1'
            : canonicalIp(bare)
          : kind === 'service'
            ? resolve(bare.toLowerCase())
            : undefined;
      if (address === undefined) return fail(new Error(`jwksUri host ${url.hostname} is not in the mesh`));
      const client = url.protocol === 'https:' ? https : http;
      const req = client.request(
        {
          host: address,
          port: url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port),
          path: `${url.pathname}${url.search}`,
          method: 'GET',
          servername: kind === 'service' ? bare : undefined,
          headers: { host: url.host, accept: 'application/json' },
          agent: false,
          ...(init.signal ? { signal: init.signal } : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (c: Buffer) => {
            size += c.length;
            if (size > maxBytes) {
              res.destroy();
              fail(new Error(`JWKS from ${uri} is over ${maxBytes} bytes`));
              return;
            }
            chunks.push(c);
          });
          res.on('error', (e) => fail(init.signal?.aborted ? init.signal.reason : e));
          res.on('end', () => {
            if (res.statusCode !== 200) fail(new Error(`JWKS from ${uri} answered ${res.statusCode}`));
            else done(new Response(Buffer.concat(chunks), { status: 200 }));
          });
        },
      );
      // jose tells a timeout by the signal's reason (a TimeoutError), not Node's AbortError.
      req.on('error', (e) => fail(init.signal?.aborted ? init.signal.reason : e));
      req.end();
    });
}
