import { CATALOGUE, type ErrorCode, type ResponseFlag } from './catalogue.js';

/**
 * The one error type that crosses module boundaries. `code` is stable and documented
 * (docs/errors.md, kept in step by errors.test.ts); `context` holds bounded facts for
 * logs, never for metric labels.
 */
export class ZmeshError extends Error {
  readonly code: ErrorCode;
  readonly context: Readonly<Record<string, unknown>>;

  constructor(code: ErrorCode, context: Record<string, unknown> = {}, options?: { cause?: unknown }) {
    super(formatMessage(code, context), options);
    this.name = 'ZmeshError';
    this.code = code;
    this.context = context;
  }

  /** The HTTP status this error answers with where it ends a CONNECT or request. */
  get status(): number {
    return CATALOGUE[this.code].status;
  }

  get flag(): ResponseFlag {
    return CATALOGUE[this.code].flag;
  }
}

function formatMessage(code: ErrorCode, context: Record<string, unknown>): string {
  const template = CATALOGUE[code].message;
  return template.replace(/\{(\w+)\}/g, (_, key: string) =>
    key in context ? String(context[key]) : `{${key}}`,
  );
}

/** Maps any thrown value to one response flag, for metrics. */
export function responseFlagOf(error: unknown): ResponseFlag {
  if (error instanceof ZmeshError) return error.flag;
  const code = (error as { code?: unknown } | null)?.code;
  switch (code) {
    case 'ECONNREFUSED':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    case 'ECONNRESET':
      return 'UF';
    case 'ETIMEDOUT':
      return 'UT';
    case 'ERR_SSL_WRONG_VERSION_NUMBER':
    case 'ERR_TLS_CERT_ALTNAME_INVALID':
    case 'CERT_HAS_EXPIRED':
    case 'UNABLE_TO_VERIFY_LEAF_SIGNATURE':
    case 'DEPTH_ZERO_SELF_SIGNED_CERT':
    case 'SELF_SIGNED_CERT_IN_CHAIN':
      return 'TLS';
    default:
      return 'INT';
  }
}

export function isZmeshError(error: unknown, code?: ErrorCode): error is ZmeshError {
  return error instanceof ZmeshError && (code === undefined || error.code === code);
}
