import { readFileSync } from 'node:fs';
import test from 'ava';
import { CATALOGUE, type ErrorCode, RESPONSE_FLAGS } from './catalogue.js';
import { REMEDIES } from './remedies.js';
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

/** `### CODE` sections of docs/errors.md with their `- cause:` and `- remedy:` lines. */
function documentedRemedies(): Map<string, { cause?: string; remedy?: string }> {
  const sections = new Map<string, { cause?: string; remedy?: string }>();
  let current: { cause?: string; remedy?: string } | undefined;
  for (const line of readFileSync(docsUrl, 'utf8').split('\n')) {
    const heading = /^### (ZM_ERR_\w+)\s*$/.exec(line);
    if (heading) {
      current = {};
      sections.set(heading[1]!, current);
    }
    const item = /^- (cause|remedy): (.*)$/.exec(line);
    if (item && current) current[item[1] as 'cause' | 'remedy'] = item[2]!.trim();
  }
  return sections;
}

test('docs/errors.md gives every code its cause and remedy, as remedies.ts has them', (t) => {
  const docs = documentedRemedies();
  t.deepEqual([...docs.keys()].sort(), Object.keys(CATALOGUE).sort());
  for (const [code, entry] of Object.entries(REMEDIES)) {
    t.deepEqual(docs.get(code), { cause: entry.cause, remedy: entry.remedy }, code);
    t.true(entry.cause.length > 0 && entry.remedy.length > 0, code);
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
