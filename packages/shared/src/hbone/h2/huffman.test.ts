import assert from 'node:assert/strict';
import test from 'ava';
import fc from 'fast-check';
import { huffmanCode, huffmanDecode, huffmanEncode, huffmanEncodedLength } from './huffman.js';

const EOS = 256;

/** Concatenates the codes of `symbols`, then pads with `padding` (a string of 0s and 1s). */
function bits(symbols: number[], padding: string): Buffer {
  let text = symbols
    .map((s) => huffmanCode(s).code.toString(2).padStart(huffmanCode(s).length, '0'))
    .join('');
  text += padding;
  assert.equal(text.length % 8, 0, 'test vector must be whole octets');
  return Buffer.from(text.match(/.{8}/g)?.map((octet) => Number.parseInt(octet, 2)) ?? []);
}

const knownCodes: [symbol: number, code: number, length: number][] = [
  [0, 0x1ff8, 13],
  [1, 0x7fffd8, 23],
  [10, 0x3ffffffc, 30],
  [32, 0x14, 6],
  [48, 0x0, 5],
  [97, 0x3, 5],
  [92, 0x7fff0, 19],
  [195, 0x7fff1, 19],
  [255, 0x3ffffee, 26],
  [EOS, 0x3fffffff, 30],
];

test('canonical construction reproduces the RFC 7541 Appendix B codes', (t) => {
  for (const [symbol, code, length] of knownCodes) {
    t.deepEqual(huffmanCode(symbol), { code, length }, `symbol ${symbol}`);
  }
});

test('the code lengths form a complete prefix code (Kraft sum is exactly 1)', (t) => {
  let sum = 0;
  for (let symbol = 0; symbol <= EOS; symbol++) sum += 2 ** (30 - huffmanCode(symbol).length);
  t.is(sum, 2 ** 30);
});

// RFC 7541 Appendix C.4 and C.6 string literals (without their length prefix).
const rfcStrings: [string, string][] = [
  ['www.example.com', 'f1e3c2e5f23a6ba0ab90f4ff'],
  ['no-cache', 'a8eb10649cbf'],
  ['custom-key', '25a849e95ba97d7f'],
  ['custom-value', '25a849e95bb8e8b4bf'],
  ['302', '6402'],
  ['private', 'aec3771a4b'],
  ['Mon, 21 Oct 2013 20:13:21 GMT', 'd07abe941054d444a8200595040b8166e082a62d1bff'],
  ['https://www.example.com', '9d29ad171863c78f0b97c8e9ae82ae43d3'],
  ['307', '640eff'],
  ['gzip', '9bd9ab'],
  [
    'foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1',
    '94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007',
  ],
];

test('encodes and decodes the RFC 7541 Appendix C Huffman strings', (t) => {
  for (const [text, hex] of rfcStrings) {
    t.is(huffmanEncode(text).toString('hex'), hex, text);
    t.is(huffmanEncodedLength(text), hex.length / 2, text);
    t.deepEqual(huffmanDecode(Buffer.from(hex, 'hex')), { ok: true, value: Buffer.from(text) }, text);
  }
});

test('round-trips random byte strings, from a Buffer or a latin1 string', (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
      const buf = Buffer.from(bytes);
      const encoded = huffmanEncode(buf);
      assert.equal(encoded.length, huffmanEncodedLength(buf));
      assert.deepEqual(huffmanEncode(buf.toString('latin1')), encoded);
      const decoded = huffmanDecode(encoded);
      assert.ok(decoded.ok);
      assert.deepEqual(decoded.value, buf);
    }),
  );
  t.pass();
});

test('every symbol round-trips, including the 30-bit ones', (t) => {
  const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  t.deepEqual(huffmanDecode(huffmanEncode(all)), { ok: true, value: all });
  t.deepEqual(huffmanDecode(Buffer.alloc(0)), { ok: true, value: Buffer.alloc(0) });
});

test('random input never throws, and what decodes re-encodes to the same octets', (t) => {
  // Accepted padding is unique (the 0-7 high bits of EOS), so decoding is injective.
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
      const decoded = huffmanDecode(Buffer.from(bytes));
      if (decoded.ok) assert.deepEqual(huffmanEncode(decoded.value), Buffer.from(bytes));
    }),
  );
  t.pass();
});

test('rejects padding of 8 bits or more (RFC 7541 §5.2)', (t) => {
  t.deepEqual(huffmanDecode(Buffer.from([0xff])), { ok: false, error: 'huffman padding longer than 7 bits' });
  // 'a' is 00011: 3 bits of padding fill its octet, then a whole octet of ones follows.
  t.deepEqual(huffmanDecode(bits([97], '111' + '11111111')), {
    ok: false,
    error: 'huffman padding longer than 7 bits',
  });
  t.deepEqual(huffmanDecode(bits([97], '111')), { ok: true, value: Buffer.from('a') });
});

test('rejects padding that is not the high bits of EOS', (t) => {
  for (const padding of ['000', '110', '011']) {
    t.deepEqual(
      huffmanDecode(bits([48], padding)),
      { ok: false, error: 'huffman padding is not a prefix of eos' },
      padding,
    );
  }
  // A code cut short is the same failure: 20-bit symbol 128 with only its first 16 bits.
  t.deepEqual(huffmanDecode(bits([128], '1111').subarray(0, 2)), {
    ok: false,
    error: 'huffman padding is not a prefix of eos',
  });
});

test('rejects an EOS symbol inside the string', (t) => {
  const eos = { ok: false, error: 'huffman string contains eos' };
  t.deepEqual(huffmanDecode(bits([EOS], '11')), eos);
  t.deepEqual(huffmanDecode(bits([97, EOS], '11111')), eos);
  t.deepEqual(huffmanDecode(bits([97, EOS, 97], '')), eos);
});

test('a string code unit above 0xff is refused rather than truncated to a byte', (t) => {
  // U+010A would otherwise become LF (0x0a).
  t.throws(() => huffmanEncodedLength('a\u010ab'), { instanceOf: RangeError });
  t.throws(() => huffmanEncode('\u{1f600}'), { instanceOf: RangeError });
});
