import { ZmeshError } from '../errors/index.js';
import { formatHostPort } from './ip.js';

/** Where a listener binds: an address and port, a Unix socket path, or an inherited socket. */
export type BindTarget = { host?: string; port?: number; path?: string } | { fd: number };

/** What the common bind failures mean to an operator; any other errno keeps the system's text. */
const BIND_REASONS: Readonly<Record<string, string>> = {
  EADDRINUSE: 'address already in use: another process holds it',
  EADDRNOTAVAIL: 'no interface on this host has that address',
  EACCES: 'permission denied',
};

/** Below this, binding a port needs root or CAP_NET_BIND_SERVICE (Linux ip_unprivileged_port_start). */
const FIRST_UNPRIVILEGED_PORT = 1024;

/**
 * The `ZM_ERR_LISTEN_BIND` for listener `name` failing to bind `target`: the address, the
 * errno and a plain reason in the message, the system error as `cause`. grpc-js reports a
 * failed bind only in its message text, so the errno is read from there when the error has
 * no `code`.
 */
export function bindError(name: string, target: BindTarget, cause: unknown): ZmeshError {
  const errno = errnoOf(cause);
  const port = 'port' in target ? target.port : undefined;
  let reason = BIND_REASONS[errno] ?? messageOf(cause);
  if (errno === 'EACCES' && port !== undefined && port > 0 && port < FIRST_UNPRIVILEGED_PORT)
    reason += `: ports below ${FIRST_UNPRIVILEGED_PORT} need root or CAP_NET_BIND_SERVICE`;
  return new ZmeshError(
    'ZM_ERR_LISTEN_BIND',
    { listener: name, address: addressOf(target), errno, reason, ...(port !== undefined ? { port } : {}) },
    { cause },
  );
}

function addressOf(target: BindTarget): string {
  if ('fd' in target) return `inherited socket fd ${target.fd}`;
  if (target.path !== undefined) return `unix:${target.path}`;
  return formatHostPort(target.host ?? '*', target.port ?? 0);
}

function errnoOf(e: unknown): string {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === 'string') return code;
  return /\b(E[A-Z]{3,})\b/.exec(messageOf(e))?.[1] ?? 'unknown error';
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
