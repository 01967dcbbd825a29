import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net from 'node:net';
import test from 'ava';
import fc from 'fast-check';
import { frame } from '../../testing/raw-h2.js';
import { type HeaderField, HpackDecoder, HpackEncoder } from './hpack.js';

const hex = (text: string) => Buffer.from(text.replace(/\s+/g, ''), 'hex');
const bytes = (...octets: number[]) => Buffer.from(octets);

/** Fields at dynamic indexes 62.. as one all-indexed block: indexed fields never change the table. */
function expectTable(decoder: HpackDecoder, want: HeaderField[]): void {
  const probe = Buffer.from(want.map((_, i) => 0x80 | (62 + i)));
  assert.deepEqual(decoder.decode(probe), { ok: true, value: { fields: want, listBytes: listBytes(want) } });
}

function listBytes(fields: HeaderField[]): number {
  return fields.reduce((sum, [name, value]) => sum + name.length + value.length + 32, 0);
}

function decodeOk(decoder: HpackDecoder, block: Buffer): HeaderField[] {
  const result = decoder.decode(block);
  if (!result.ok) throw new Error(`decode failed: ${result.error}`);
  return result.value.fields;
}

// RFC 7541 Appendix C.2: each example starts from an empty table.
const c2: [string, string, HeaderField, HeaderField[]][] = [
  [
    'C.2.1 literal with indexing',
    '400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572',
    ['custom-key', 'custom-header'],
    [['custom-key', 'custom-header']],
  ],
  ['C.2.2 literal without indexing', '040c 2f73 616d 706c 652f 7061 7468', [':path', '/sample/path'], []],
  ['C.2.3 literal never indexed', '1008 7061 7373 776f 7264 0673 6563 7265 74', ['password', 'secret'], []],
  ['C.2.4 indexed', '82', [':method', 'GET'], []],
];

for (const [name, block, field, table] of c2) {
  test(`RFC 7541 ${name}`, (t) => {
    const decoder = new HpackDecoder();
    t.deepEqual(decoder.decode(hex(block)), {
      ok: true,
      value: { fields: [field], listBytes: listBytes([field]) },
    });
    expectTable(decoder, table);
    t.deepEqual(decoder.decode(bytes(0x80 | (62 + table.length))), {
      ok: false,
      error: `index ${62 + table.length} out of range`,
    });
  });
}

type Step = { block: string; fields: HeaderField[]; table: HeaderField[] };
const authority: HeaderField = [':authority', 'www.example.com'];
const noCache: HeaderField = ['cache-control', 'no-cache'];
const customValue: HeaderField = ['custom-key', 'custom-value'];
const requests = (blocks: string[]): Step[] => [
  {
    block: blocks[0]!,
    fields: [[':method', 'GET'], [':scheme', 'http'], [':path', '/'], authority],
    table: [authority],
  },
  {
    block: blocks[1]!,
    fields: [[':method', 'GET'], [':scheme', 'http'], [':path', '/'], authority, noCache],
    table: [noCache, authority],
  },
  {
    block: blocks[2]!,
    fields: [[':method', 'GET'], [':scheme', 'https'], [':path', '/index.html'], authority, customValue],
    table: [customValue, noCache, authority],
  },
];

const date21: HeaderField = ['date', 'Mon, 21 Oct 2013 20:13:21 GMT'];
const date22: HeaderField = ['date', 'Mon, 21 Oct 2013 20:13:22 GMT'];
const location: HeaderField = ['location', 'https://www.example.com'];
const priv: HeaderField = ['cache-control', 'private'];
const cookie: HeaderField = ['set-cookie', 'foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1'];
const gzip: HeaderField = ['content-encoding', 'gzip'];
const responses = (blocks: string[]): Step[] => [
  {
    block: blocks[0]!,
    fields: [[':status', '302'], priv, date21, location],
    table: [location, date21, priv, [':status', '302']],
  },
  {
    block: blocks[1]!,
    fields: [[':status', '307'], priv, date21, location],
    table: [[':status', '307'], location, date21, priv],
  },
  {
    block: blocks[2]!,
    fields: [[':status', '200'], priv, date22, location, gzip, cookie],
    table: [cookie, gzip, date22],
  },
];

const sequences: [string, number, Step[]][] = [
  [
    'C.3 requests without Huffman',
    4096,
    requests([
      '8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d',
      '8286 84be 5808 6e6f 2d63 6163 6865',
      '8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65',
    ]),
  ],
  [
    'C.4 requests with Huffman',
    4096,
    requests([
      '8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff',
      '8286 84be 5886 a8eb 1064 9cbf',
      '8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf',
    ]),
  ],
  [
    'C.5 responses without Huffman, 256-octet table',
    256,
    responses([
      `4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
       2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d`,
      '4803 3330 37c1 c0bf',
      `88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
       54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
       5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31`,
    ]),
  ],
  [
    'C.6 responses with Huffman, 256-octet table',
    256,
    responses([
      `4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
       2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3`,
      '4883 640e ffc1 c0bf',
      `88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
       77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
       9587 3160 65c0 03ed 4ee5 b106 3d50 07`,
    ]),
  ],
];

for (const [name, maxTableSize, steps] of sequences) {
  test(`RFC 7541 ${name}: one decoder across the blocks, table checked after each`, (t) => {
    const decoder = new HpackDecoder({ maxTableSize });
    for (const [i, step] of steps.entries()) {
      t.deepEqual(decodeOk(decoder, hex(step.block)), step.fields, `block ${i + 1}`);
      expectTable(decoder, step.table);
    }
    const past = 62 + steps.at(-1)!.table.length;
    t.deepEqual(decoder.decode(bytes(0x80 | past)), { ok: false, error: `index ${past} out of range` });
  });

  test(`RFC 7541 ${name}: every truncation returns a prefix or an error, never throws`, (t) => {
    for (const [k, step] of steps.entries()) {
      const block = hex(step.block);
      for (let cut = 0; cut < block.length; cut++) {
        const decoder = new HpackDecoder({ maxTableSize });
        for (const earlier of steps.slice(0, k)) decodeOk(decoder, hex(earlier.block));
        const result = decoder.decode(block.subarray(0, cut));
        if (result.ok) t.deepEqual(result.value.fields, step.fields.slice(0, result.value.fields.length));
        else t.regex(result.error, /^[a-z0-9 ^-]+$/);
      }
    }
  });
}

const staticPairs: HeaderField[] = [
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '404'],
  ['accept-encoding', 'gzip, deflate'],
  [':authority', ''],
  ['content-type', ''],
];
const latin1 = fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b).toString('latin1'));
const fieldArb: fc.Arbitrary<HeaderField> = fc.oneof(
  fc.constantFrom(...staticPairs),
  fc.tuple(fc.constantFrom(':method', ':status', 'content-type', 'user-agent', 'set-cookie'), latin1),
  fc.tuple(fc.stringMatching(/^[a-z][a-z0-9-]{0,24}$/), latin1),
);

test('random header lists round-trip through one encoder and one decoder', (t) => {
  const encoder = new HpackEncoder();
  const decoder = new HpackDecoder();
  fc.assert(
    fc.property(fc.array(fieldArb, { maxLength: 40 }), (fields) => {
      const result = decoder.decode(encoder.encode(fields));
      assert.deepEqual(result, { ok: true, value: { fields, listBytes: listBytes(fields) } });
    }),
    { numRuns: 500 },
  );
  t.pass();
});

test('encoder output cut at any octet decodes to the whole fields before the cut, or fails', (t) => {
  const encoder = new HpackEncoder();
  encoder.encode([]); // takes the one-off size update
  const fields: HeaderField[] = [
    [':method', 'CONNECT'],
    [':authority', '10.0.0.1:8080'],
    ['x-zmesh-error', 'upstream refused'],
    ['baggage', 'k=v'],
    [':status', '200'],
  ];
  const parts = fields.map((field) => encoder.encode([field]));
  const block = Buffer.concat(parts);
  const boundaries = new Map<number, number>([[0, 0]]);
  let end = 0;
  for (const [i, part] of parts.entries()) {
    end += part.length;
    boundaries.set(end, i + 1);
  }
  for (let cut = 0; cut <= block.length; cut++) {
    const result = new HpackDecoder().decode(block.subarray(0, cut));
    const whole = boundaries.get(cut);
    if (whole === undefined) t.false(result.ok, `cut at ${cut}`);
    else t.deepEqual(result.ok && result.value.fields, fields.slice(0, whole), `cut at ${cut}`);
  }
});

test('random octets never make the decoder throw', (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 100 }), (input) => {
      const result = new HpackDecoder({ maxTableSize: 256 }).decode(Buffer.from(input));
      assert.equal(typeof result.ok, 'boolean');
    }),
    { numRuns: 2000 },
  );
  t.pass();
});

const rejections: [string, Buffer, string][] = [
  ['index 0', bytes(0x80), 'index 0 is not allowed'],
  ['an index past the empty dynamic table', bytes(0xbe), 'index 62 out of range'],
  ['a literal whose name index is past the table', bytes(0x0f, 0x30, 0x01, 0x61), 'index 63 out of range'],
  ['a size update above our setting', bytes(0x3f, 0xe2, 0x1f), 'table size update 4097 above 4096'],
  ['a size update after a field', bytes(0x82, 0x20), 'dynamic table size update after a header field'],
  ['an integer above 2^31', bytes(0x3f, 0xff, 0xff, 0xff, 0xff, 0x0f), 'integer above 2^31 - 1'],
  [
    'an integer with six continuation octets',
    bytes(0x3f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00),
    'integer longer than 5 continuation octets',
  ],
  ['a string length above 2^31', bytes(0x00, 0x7f, 0xff, 0xff, 0xff, 0xff, 0x0f), 'integer above 2^31 - 1'],
  ['a truncated integer', bytes(0xff), 'truncated integer'],
  ['a string longer than the block', bytes(0x00, 0x05, 0x61), 'truncated string literal'],
  ['a literal without its value', bytes(0x00, 0x01, 0x61), 'truncated string literal'],
  ['a huffman value padded with zeros', bytes(0x04, 0x81, 0x00), 'huffman padding is not a prefix of eos'],
  ['a huffman value with 8 bits of padding', bytes(0x04, 0x81, 0xff), 'huffman padding longer than 7 bits'],
  [
    'a huffman value containing eos',
    bytes(0x04, 0x84, 0xff, 0xff, 0xff, 0xff),
    'huffman string contains eos',
  ],
];

for (const [name, block, error] of rejections) {
  test(`rejects ${name}`, (t) => {
    t.deepEqual(new HpackDecoder().decode(block), { ok: false, error });
  });
}

test('size updates: RFC 7541 C.1.2 integer 1337, several at the start, down to 0 evicts all', (t) => {
  t.true(new HpackDecoder().decode(bytes(0x3f, 0x9a, 0x0a)).ok);
  t.deepEqual(new HpackDecoder({ maxTableSize: 1336 }).decode(bytes(0x3f, 0x9a, 0x0a)), {
    ok: false,
    error: 'table size update 1337 above 1336',
  });
  const decoder = new HpackDecoder();
  decodeOk(decoder, hex(sequences[0]![2][0]!.block));
  // 1337 then 4096: both above the 57 octets in use, so nothing is evicted.
  t.deepEqual(decodeOk(decoder, bytes(0x3f, 0x9a, 0x0a, 0x3f, 0xe1, 0x1f, 0xbe)), [authority]);
  t.deepEqual(decoder.decode(bytes(0x20, 0xbe)), { ok: false, error: 'index 62 out of range' });
});

test('an entry larger than the table empties it and is not added (RFC 7541 §4.4)', (t) => {
  const decoder = new HpackDecoder({ maxTableSize: 100 });
  decodeOk(decoder, bytes(0x40, 0x01, 0x61, 0x01, 0x62));
  expectTable(decoder, [['a', 'b']]);
  const big = Buffer.concat([bytes(0x40, 0x01, 0x78, 70), Buffer.alloc(70, 0x79)]);
  t.deepEqual(decodeOk(decoder, big), [['x', 'y'.repeat(70)]]);
  t.deepEqual(decoder.decode(bytes(0xbe)), { ok: false, error: 'index 62 out of range' });
});

test('limits: field count, string octets before and after huffman; a big list is not an error', (t) => {
  t.true(new HpackDecoder({ maxFields: 3 }).decode(bytes(0x82, 0x82, 0x82)).ok);
  t.deepEqual(new HpackDecoder({ maxFields: 3 }).decode(bytes(0x82, 0x82, 0x82, 0x82)), {
    ok: false,
    error: 'more than 3 header fields',
  });
  t.false(new HpackDecoder().decode(Buffer.alloc(257, 0x82)).ok);
  const raw = Buffer.concat([bytes(0x04, 17), Buffer.alloc(17, 0x61)]);
  t.deepEqual(new HpackDecoder({ maxStringBytes: 16 }).decode(raw), {
    ok: false,
    error: 'string of 17 octets too long',
  });
  const huffman = new HpackEncoder().encode([[':path', 'a'.repeat(20)]]).subarray(1);
  t.true(huffman.length < 16);
  t.deepEqual(new HpackDecoder({ maxStringBytes: 16 }).decode(huffman), {
    ok: false,
    error: 'string of 20 octets too long',
  });
  const large = new HpackEncoder().encode([['x-big', 'v'.repeat(60_000)]]);
  const decoded = new HpackDecoder().decode(large);
  t.true(decoded.ok && decoded.value.listBytes === 5 + 60_000 + 32);
});

test('field octets decode as latin1', (t) => {
  const block = bytes(0x00, 0x02, 0xe9, 0x74, 0x03, 0x63, 0xa0, 0xff);
  t.deepEqual(decodeOk(new HpackDecoder(), block), [['\xe9t', 'c\xa0\xff']]);
});

test('encoder: first block starts with a size update to 0, then none', (t) => {
  const encoder = new HpackEncoder();
  t.deepEqual(encoder.encode([[':method', 'GET']]), bytes(0x20, 0x82));
  t.deepEqual(encoder.encode([[':method', 'GET']]), bytes(0x82));
  t.deepEqual(encoder.encode([]), bytes());
});

test('encoder: static full match is one octet, static name is indexed, others literal', (t) => {
  const encoder = new HpackEncoder();
  encoder.encode([]);
  t.deepEqual(encoder.encode([[':status', '200']]), bytes(0x88));
  t.deepEqual(
    encoder.encode([[':method', 'CONNECT']]),
    Buffer.concat([bytes(0x02, 0x07), Buffer.from('CONNECT')]),
  );
  const authorityBlock = encoder.encode([[':authority', '10.0.0.1:8080']]);
  t.is(authorityBlock[0], 0x01);
  t.is(authorityBlock[1], 0x80 | (authorityBlock.length - 2), 'huffman is shorter for an address');
  const binary = encoder.encode([['x-bin', '\xff\xfe']]);
  t.deepEqual(binary.subarray(-3), bytes(0x02, 0xff, 0xfe), 'raw when huffman is longer');
  t.is(binary[0], 0x00);
});

test('encoder: never indexes, so the peer table stays empty; big blocks too', (t) => {
  const encoder = new HpackEncoder();
  const decoder = new HpackDecoder();
  const fields: HeaderField[] = [
    ['x-zmesh-error', 'x'.repeat(20_000)],
    ['traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'],
  ];
  t.deepEqual(decodeOk(decoder, encoder.encode(fields)), fields);
  t.deepEqual(decoder.decode(bytes(0xbe)), { ok: false, error: 'index 62 out of range' });
});

test('encoder: a code unit above 0xff throws instead of being cut to a byte', (t) => {
  const encoder = new HpackEncoder();
  t.throws(() => encoder.encode([['x-a', 'caf\u00e9 \u010a']]), { instanceOf: RangeError });
  t.deepEqual(encoder.encode([]), bytes(0x20), 'the size update is still owed after a throw');
});

// --- Interop with nghttp2 through node:http2, over a raw socket that speaks just enough HTTP/2.

const FRAME_HEADERS = 1;
const FRAME_RST_STREAM = 3;
const FRAME_SETTINGS = 4;
const FRAME_GOAWAY = 7;
const FLAG_ACK = 0x1;
const FLAG_END_STREAM = 0x1;
const FLAG_END_HEADERS = 0x4;
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

interface Frame {
  type: number;
  flags: number;
  stream: number;
  payload: Buffer;
}

function rawClient(port: number): { socket: net.Socket; next(): Promise<Frame> } {
  const socket = net.connect(port, '127.0.0.1');
  const frames: Frame[] = [];
  let pending = Buffer.alloc(0);
  let wake = () => {};
  let closed = false;
  socket.on('data', (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    while (pending.length >= 9 && pending.length >= 9 + pending.readUIntBE(0, 3)) {
      const end = 9 + pending.readUIntBE(0, 3);
      const stream = pending.readUInt32BE(5) & 0x7fffffff;
      frames.push({ type: pending[3]!, flags: pending[4]!, stream, payload: pending.subarray(9, end) });
      pending = pending.subarray(end);
    }
    wake();
  });
  socket.on('close', () => {
    closed = true;
    wake();
  });
  const next = async (): Promise<Frame> => {
    while (frames.length === 0) {
      if (closed) throw new Error('connection closed');
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
    return frames.shift()!;
  };
  return { socket, next };
}

const longRequestValue = `${'0123456789abcdef'.repeat(200)}-end`;
const requestFields = (authority: string, path: string): HeaderField[] => [
  [':method', 'GET'],
  [':scheme', 'http'],
  [':path', path],
  [':authority', authority],
  ['user-agent', 'zmesh-hpack-test'],
  ['x-latin1', 'caf\xe9 na\xefve \xa9 \xff!'],
  ['x-long', longRequestValue],
  ['traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'],
  ['baggage', 'tenant=acme,region=eu-west-1'],
  ['forwarded', 'for="10.0.0.1"'],
  ['accept-encoding', 'gzip, deflate'],
];

const longResponseValue = 'ab'.repeat(1000);
const responseHeaders = (stream: number) => ({
  ':status': 200,
  'content-type': 'text/plain; charset=utf-8',
  'cache-control': 'private, max-age=0',
  'x-served-by': 'node-http2-interop',
  'x-long': longResponseValue,
  'x-repeated': ['first value', 'second value', 'third value'],
  'x-stream': String(stream),
});

for (const headerTableSize of [4096, 0]) {
  test(`nghttp2 decodes our blocks and we decode its, server header table ${headerTableSize}`, async (t) => {
    t.timeout(10_000);
    const server = http2.createServer({ settings: { headerTableSize } });
    const received: string[][] = [];
    // Node passes the fields in wire order as a fourth argument, which @types/node leaves out.
    server.on('stream', (stream: http2.ServerHttp2Stream, ...rest: unknown[]) => {
      received.push(rest[2] as string[]);
      stream.respond(responseHeaders(stream.id!), { endStream: true });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as net.AddressInfo).port;
    const client = rawClient(port);
    t.teardown(() => {
      client.socket.destroy();
      server.close();
    });

    const encoder = new HpackEncoder();
    const decoder = new HpackDecoder();
    const authority = `127.0.0.1:${port}`;
    const send = (stream: number) =>
      frame(
        FRAME_HEADERS,
        FLAG_END_STREAM | FLAG_END_HEADERS,
        stream,
        encoder.encode(requestFields(authority, `/r${stream}`)),
      );
    client.socket.write(Buffer.concat([PREFACE, frame(FRAME_SETTINGS, 0, 0, Buffer.alloc(0)), send(1)]));
    const blocks = new Map<number, { size: number; fields: HeaderField[] }>();
    while (blocks.size < 2) {
      const f = await client.next();
      if (f.type === FRAME_GOAWAY || f.type === FRAME_RST_STREAM) t.fail(`server sent frame type ${f.type}`);
      if (f.type === FRAME_SETTINGS && !(f.flags & FLAG_ACK))
        client.socket.write(frame(FRAME_SETTINGS, FLAG_ACK, 0, Buffer.alloc(0)));
      if (f.type !== FRAME_HEADERS) continue;
      t.is(f.flags & FLAG_END_HEADERS, FLAG_END_HEADERS);
      // Blocks are decoded in arrival order: nghttp2's table spans both responses.
      blocks.set(f.stream, { size: f.payload.length, fields: decodeOk(decoder, f.payload) });
      if (f.stream === 1) client.socket.write(send(3));
    }

    t.deepEqual(
      received,
      [1, 3].map((stream) => requestFields(authority, `/r${stream}`).flat()),
    );
    for (const stream of [1, 3]) {
      const fields = blocks.get(stream)!.fields;
      const want = Object.entries(responseHeaders(stream)).flatMap(([name, value]) =>
        Array.isArray(value)
          ? value.map((v): HeaderField => [name, v])
          : [[name, String(value)] as HeaderField],
      );
      t.deepEqual(
        fields.filter(([name]) => name !== 'date'),
        want,
      );
      t.regex(fields.find(([name]) => name === 'date')?.[1] ?? '', / GMT$/);
    }
    t.true(blocks.get(1)!.size < longResponseValue.length, 'nghttp2 Huffman-coded the long value');
    t.true(blocks.get(3)!.size < blocks.get(1)!.size / 4, 'the second response reuses the dynamic table');
  });
}
