import { request } from 'node:http';
import { connectInNetns } from '@zmesh/ztunnel';

/** Bound on one admin request into a node's namespace. */
const NETNS_HTTP_TIMEOUT_MS = 5000;

/**
 * An HTTP request to a server inside another network namespace (a node's ztunnel admin
 * ports, which are reachable only from inside that node; a waypoint's on its pod address), over a socket this process
 * creates in that namespace. No route into the cluster is needed, so none exists.
 */
export function netnsHttp(
  netnsPath: string,
  port: number,
  path: string,
  method = 'GET',
  host = '127.0.0.1',
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        method,
        path,
        host,
        port,
        timeout: NETNS_HTTP_TIMEOUT_MS,
        createConnection: () => connectInNetns(netnsPath, host, port),
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          body += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`timeout after ${NETNS_HTTP_TIMEOUT_MS} ms`)));
    req.on('error', reject);
    req.end();
  });
}
