import { err, ok, type Result } from '../../result.js';
import type { H2Headers, H2OutgoingHeaders } from './h2-stream.js';
import type { HeaderField } from './hpack.js';

const REQUEST_PSEUDO = new Set([':method', ':scheme', ':authority', ':path', ':protocol']);
const RESPONSE_PSEUDO = new Set([':status']);
/** Connection-specific fields, malformed in HTTP/2 (RFC 9113 §8.2.2). */
const CONNECTION_FIELDS = new Set([
  'connection',
  'proxy-connection',
  'keep-alive',
  'transfer-encoding',
  'upgrade',
]);
/** RFC 9113 §8.2.1: a name is lowercase token characters; a value has no NUL, CR or LF. */
const BAD_NAME = /[^!#$%&'*+\-.^_`|~0-9a-z]/;
const BAD_VALUE = /[\0\r\n]/;
const EDGE_WHITESPACE = /^[ \t]|[ \t]$/;

export type HeaderKind = 'request' | 'response' | 'trailers';

/**
 * Checks a decoded field section (RFC 9113 §8.1.1 "malformed", §8.2, §8.3) and folds it
 * into a record. Returns the reason a section is malformed: the stream is then reset with
 * PROTOCOL_ERROR, the connection goes on. Method semantics (CONNECT only) are HBONE's to
 * judge, above this layer, so that a wrong method gets a 400 rather than a reset.
 */
export function receivedHeaders(fields: readonly HeaderField[], kind: HeaderKind): Result<H2Headers, string> {
  const out: H2Headers = Object.create(null) as H2Headers;
  const pseudoAllowed =
    kind === 'request' ? REQUEST_PSEUDO : kind === 'response' ? RESPONSE_PSEUDO : undefined;
  let regularSeen = false;
  for (const [name, value] of fields) {
    if (name.length === 0) return err('empty field name');
    if (name.charCodeAt(0) === 0x3a) {
      if (!pseudoAllowed?.has(name)) return err(`pseudo-header ${name} not allowed here`);
      if (regularSeen) return err(`pseudo-header ${name} after a regular field`);
      if (out[name] !== undefined) return err(`pseudo-header ${name} repeated`);
    } else {
      regularSeen = true;
      if (BAD_NAME.test(name)) return err(`invalid field name ${JSON.stringify(name.slice(0, 64))}`);
      if (CONNECTION_FIELDS.has(name)) return err(`connection-specific field ${name}`);
      if (name === 'te' && value !== 'trailers') return err('te other than "trailers"');
    }
    if (BAD_VALUE.test(value) || EDGE_WHITESPACE.test(value)) return err(`invalid value for ${name}`);
    add(out, name, value);
  }
  if (kind === 'request' && out[':method'] === undefined) return err('request without :method');
  if (kind === 'response' && !/^[1-5][0-9][0-9]$/.test(String(out[':status'] ?? ''))) {
    return err('response without a valid :status');
  }
  return ok(out);
}

function add(out: H2Headers, name: string, value: string): void {
  const seen = out[name];
  if (seen === undefined) out[name] = value;
  else if (typeof seen === 'string') out[name] = [seen, value];
  else seen.push(value);
}

/** Our own headers as fields, pseudo-headers first (RFC 9113 §8.3); throws on a value HTTP/2 cannot carry. */
export function outgoingFields(headers: H2OutgoingHeaders): HeaderField[] {
  const pseudo: HeaderField[] = [];
  const regular: HeaderField[] = [];
  for (const key of Object.keys(headers)) {
    const v = headers[key];
    if (v === undefined) continue;
    const name = key.toLowerCase();
    const list = name.charCodeAt(0) === 0x3a ? pseudo : regular;
    for (const value of Array.isArray(v) ? v : [v]) {
      const text = String(value);
      if (BAD_VALUE.test(text)) throw new Error(`header ${name} has a value HTTP/2 cannot carry`);
      list.push([name, text]);
    }
  }
  return pseudo.length === 0 ? regular : regular.length === 0 ? pseudo : pseudo.concat(regular);
}
