import test from 'ava';
import { duplexPair } from './duplex-pair.js';
import { classify, detectProtocol } from './protocol-detector.js';

test('classify: h2 preface, HTTP/1.1 methods, anything else is TCP', (t) => {
  const c = (s: string | Buffer) => classify(Buffer.isBuffer(s) ? s : Buffer.from(s, 'latin1'));
  t.is(c('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), 'h2');
  t.is(c('PRI * HTTP/2'), undefined, 'a preface prefix waits for more');
  t.is(c('GET / HTTP/1.1\r\n'), 'h1');
  t.is(c('M-SEARCH * HTTP/1.1'), 'h1');
  t.is(c('GE'), undefined);
  t.is(c('get / HTTP/1.1'), 'tcp', 'methods are case-sensitive (RFC 9110 §9.1)');
  t.is(c(' GET'), 'tcp');
  t.is(c(Buffer.from([0x16, 0x03, 0x01])), 'tcp', 'a TLS ClientHello');
  t.is(c('A'.repeat(30)), 'tcp');
});

test('detection puts the bytes back, and silence means TCP', async (t) => {
  const [a, b] = duplexPair();
  a.write('GET / HTTP/1.1\r\n');
  t.is(await detectProtocol(b), 'h1');
  const chunk = await new Promise<Buffer>((resolve) => {
    b.once('data', resolve);
    b.resume();
  });
  t.is(chunk.toString(), 'GET / HTTP/1.1\r\n');
  const [, quiet] = duplexPair();
  const started = Date.now();
  t.is(await detectProtocol(quiet, 50), 'tcp');
  t.true(Date.now() - started >= 45);
});

test('duplex pair: half-close and back-pressure', async (t) => {
  const [a, b] = duplexPair();
  const got: Buffer[] = [];
  b.on('data', (c: Buffer) => got.push(c));
  const ended = new Promise((r) => b.once('end', r));
  a.write(Buffer.alloc(100_000, 1));
  a.end();
  await ended;
  t.is(Buffer.concat(got).length, 100_000);
  t.false(a.destroyed, 'the other direction is still open');
  b.end('bye');
  const back = await new Promise<string>((resolve) => a.once('data', (c: Buffer) => resolve(c.toString())));
  t.is(back, 'bye');
});
