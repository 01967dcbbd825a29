import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ZmeshError } from '../errors/index.js';

/**
 * node:http as its CommonJS object, taken when a request is made: an ESM import of it reads
 * every export, and its lazy ones (WebSocket, fetch's classes) load undici, ~30 ms of CPU on
 * every start of the operator CLI, a usage error included.
 */
const http = () => process.getBuiltinModule('node:http');

/** A token shorter than this is a placeholder, not a secret. */
export const MIN_ADMIN_TOKEN_CHARS = 16;
/** Longest admin request (an `ns l7` waits for ACKs up to 120 s). */
const ADMIN_REQUEST_TIMEOUT_MS = 150_000;

/**
 * Where the control plane's admin API listens by default, and where the CLI looks for it:
 * a Unix socket, mode 0600, so only its owner can apply config or mint node tokens. Root:
 * /run/zmesh/control-plane.sock; anyone else: under $XDG_RUNTIME_DIR or the temp directory.
 */
export function defaultAdminSocket(): string {
  if (process.getuid?.() === 0) return '/run/zmesh/control-plane.sock';
  const base = process.env.XDG_RUNTIME_DIR ?? tmpdir();
  return join(base, `zmesh-${process.getuid?.() ?? 'user'}`, 'control-plane.sock');
}

/** Reads a bearer token file (trimmed); refuses a missing, unreadable or short one. */
export async function readAdminToken(file: string): Promise<string> {
  const text = await readFile(file, 'utf8').catch((e: NodeJS.ErrnoException) => e);
  if (text instanceof Error) throw new ZmeshError('ZM_ERR_ADMIN_TOKEN_FILE', { file, reason: text.message });
  const token = text.trim();
  if (token.length < MIN_ADMIN_TOKEN_CHARS || /\s/.test(token))
    throw new ZmeshError('ZM_ERR_ADMIN_TOKEN_FILE', {
      file,
      reason: `must hold one token of at least ${MIN_ADMIN_TOKEN_CHARS} characters`,
    });
  return token;
}

/** The admin endpoint: a Unix socket path, or an `http://host:port` URL with its bearer token. */
export interface AdminTarget {
  admin: string;
  token?: string;
}

export interface AdminResponse {
  status: number;
  ok: boolean;
  text: string;
  json<T = unknown>(): T;
}

/**
 * One request to the control plane's admin API, over its Unix socket or TCP (with the
 * bearer token). A connection that fails (no socket, permission denied, nothing
 * listening) rejects with ZM_ERR_ADMIN_UNREACHABLE, for a one-line CLI error.
 */
export function adminRequest(
  target: AdminTarget,
  path: string,
  init: { method?: string; body?: string } = {},
): Promise<AdminResponse> {
  const tcp = /^https?:\/\//.test(target.admin);
  const url = tcp ? new URL(path, target.admin) : undefined;
  const headers: Record<string, string> = {};
  if (target.token !== undefined) headers.authorization = `Bearer ${target.token}`;
  if (init.body !== undefined) headers['content-type'] = 'application/yaml';
  return new Promise((resolve, reject) => {
    const req = http().request(
      {
        method: init.method ?? 'GET',
        headers,
        timeout: ADMIN_REQUEST_TIMEOUT_MS,
        ...(url
          ? { host: url.hostname, port: url.port, path: `${url.pathname}${url.search}` }
          : { socketPath: target.admin, path }),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (e) => reject(unreachable(target, e)));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          resolve({ status, ok: status >= 200 && status < 300, text, json: () => JSON.parse(text) });
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer in ${ADMIN_REQUEST_TIMEOUT_MS} ms`)));
    req.on('error', (e) => reject(unreachable(target, e)));
    req.end(init.body);
  });
}

function unreachable(target: AdminTarget, e: Error): ZmeshError {
  return new ZmeshError('ZM_ERR_ADMIN_UNREACHABLE', { admin: target.admin, reason: e.message });
}
