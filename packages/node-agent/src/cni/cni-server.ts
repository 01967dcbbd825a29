import { chmodSync, lstatSync, mkdirSync, unlinkSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { dirname, isAbsolute } from 'node:path';
import { isZmeshError, logger, ZmeshError } from '@zmesh/shared';
import type { Counter } from 'prom-client';
import type { CniAdd } from '../node-agent.js';

const log = logger('cni-server');

/** A CNI ADD request is a few hundred bytes; anything past this is refused unread. */
const MAX_BODY = 16 * 1024;
/** Bound on receiving one request (not on answering it: that waits for ztunnel's Ack). */
const REQUEST_TIMEOUT_MS = 10_000;
const NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const UID = /^[A-Za-z0-9._-]{1,128}$/;

/**
 * The node agent's socket for the CNI plugin (zmesh-cni): HTTP on a Unix socket, mode 0600
 * (root only, as the runtime runs plugins), one route, `POST /cmdadd` with the ADD's pod
 * and netns. 200 `{enrolled}` lets the ADD succeed; anything else carries `{error}` (a
 * `ZM_ERR_*` line) and fails it.
 */
export function startCniServer(
  path: string,
  onAdd: (add: CniAdd) => Promise<boolean>,
  refused: Counter<'result'>,
): Promise<Server> {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  try {
    if (lstatSync(path).isSocket()) unlinkSync(path);
  } catch {
    // Nothing there.
  }
  const server = createServer((req, res) => {
    const answer = (status: number, body: object) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify(body)}\n`);
    };
    void handle(req, onAdd).then(
      (enrolled) => answer(200, { enrolled }),
      (e: unknown) => {
        const z = isZmeshError(e) ? e : new ZmeshError('ZM_ERR_CNI_REFUSED', { pod: '?', reason: String(e) });
        const bad = z.context.bad === true;
        if (bad) refused.inc({ result: 'bad-request' });
        log.warn({ code: z.code, err: z.message }, 'CNI ADD refused');
        answer(bad ? 400 : 503, { error: `${z.code}: ${z.message}` });
      },
    );
  });
  // A request is a few hundred bytes: one that trickles in is dropped.
  server.headersTimeout = REQUEST_TIMEOUT_MS;
  server.requestTimeout = REQUEST_TIMEOUT_MS;
  const old = process.umask(0o177);
  return new Promise((resolve, reject) => {
    server.once('error', (e) => {
      process.umask(old);
      reject(e);
    });
    server.listen(path, () => {
      process.umask(old);
      chmodSync(path, 0o600);
      resolve(server);
    });
  });
}

async function handle(req: IncomingMessage, onAdd: (add: CniAdd) => Promise<boolean>): Promise<boolean> {
  const bad = (reason: string) => new ZmeshError('ZM_ERR_CNI_REFUSED', { pod: '?', reason, bad: true });
  if (req.method !== 'POST' || req.url !== '/cmdadd') throw bad(`no route ${req.method} ${req.url}`);
  let text = '';
  for await (const chunk of req) {
    text += String(chunk);
    if (text.length > MAX_BODY) throw bad(`request over ${MAX_BODY} bytes`);
  }
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw bad('request is not JSON');
  }
  if (typeof body !== 'object' || body === null) throw bad('request is not a JSON object');
  const str = (k: string) => (typeof body[k] === 'string' ? (body[k] as string) : undefined);
  const add: CniAdd = {
    netns: str('netns') ?? '',
    containerId: str('containerId') ?? '',
    podName: str('podName') ?? '',
    podNamespace: str('podNamespace') ?? '',
    ...(str('podUid') === undefined ? {} : { podUid: str('podUid') as string }),
  };
  if (!isAbsolute(add.netns) || add.netns.length > 4096) throw bad('netns must be an absolute path');
  if (!NAME.test(add.podName) || !NAME.test(add.podNamespace)) throw bad('podName/podNamespace malformed');
  if (add.containerId === '' || add.containerId.length > 256) throw bad('containerId malformed');
  if (add.podUid !== undefined && !UID.test(add.podUid)) throw bad('podUid malformed');
  return onAdd(add);
}
