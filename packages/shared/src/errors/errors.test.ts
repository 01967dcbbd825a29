import { readFileSync } from 'node:fs';
import test from 'ava';
import { CATALOGUE, type ErrorCode, RESPONSE_FLAGS } from './catalogue.js';
import { responseFlagOf, ZmeshError } from './zmesh-error.js';

const docsUrl = new URL('../../../../docs/errors.md', import.meta.url);

function documentedRows(): Map<string, { status: number; flag: string; message: string }> {
  const rows = new Map<string, { status: number; flag: string; message: string }>();
  for (const line of readFileSync(docsUrl, 'utf8').split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    if (cells.length === 6 && cells[1]?.startsWith('ZM_ERR_')) {
      rows.set(cells[1], { status: Number(cells[2]), flag: cells[3]!, message: cells[4]! });
    }
  }
  return rows;
}

test('docs/errors.md lists exactly the catalogue, with the same status, flag and message', (t) => {
  const docs = documentedRows();
  t.deepEqual([...docs.keys()].sort(), Object.keys(CATALOGUE).sort());
  for (const [code, entry] of Object.entries(CATALOGUE)) {
    t.deepEqual(docs.get(code), { status: entry.status, flag: entry.flag, message: entry.message }, code);
  }
});

test('every code is ZM_ERR_<AREA>_<PROBLEM> and maps to a known response flag', (t) => {
  for (const [code, entry] of Object.entries(CATALOGUE)) {
    t.regex(code, /^ZM_ERR_[A-Z0-9]+_[A-Z0-9_]+$/);
    t.true((RESPONSE_FLAGS as readonly string[]).includes(entry.flag), code);
  }
});

test('messages are filled from context and keep the cause', (t) => {
  const cause = new Error('ECONNREFUSED');
  const e = new ZmeshError(
    'ZM_ERR_HBONE_UPSTREAM_CONNECT',
    { target: '10.0.0.1:80', reason: 'refused' },
    { cause },
  );
  t.is(e.message, 'connect to 10.0.0.1:80 failed: refused');
  t.is(e.status, 503);
  t.is(e.cause, cause);
  t.is(responseFlagOf(e), 'UF');
});

test('non-zmesh errors collapse to a bounded flag', (t) => {
  t.is(responseFlagOf(Object.assign(new Error('x'), { code: 'ECONNREFUSED' })), 'UF');
  t.is(responseFlagOf(new Error('anything')), 'INT');
  t.is(responseFlagOf(undefined), 'INT');
  const code: ErrorCode = 'ZM_ERR_INTERNAL_FAULT';
  t.is(responseFlagOf(new ZmeshError(code, { reason: 'x' })), 'INT');
});
