import { err, ok, type Result } from '../../result.js';

/**
 * RFC 7541 Appendix B code lengths for symbols 0..255 and EOS (256). The code is canonical
 * (codes of one length are consecutive, ordered by symbol, and shorter codes sort first), so
 * the lengths alone determine it: 257 bytes here instead of a 257-row table of hex codes.
 */
// biome-ignore format: one row per 16 symbols, as the lengths are usually printed
const LENGTHS = Uint8Array.of(
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, //   0-15
  28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, //  16-31
  6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, //          32-47
  5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, //               48-63
  13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, //                 64-79
  7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, //              80-95
  15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, //                 96-111
  6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, //            112-127
  20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, // 128-143
  24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, // 144-159
  22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, // 160-175
  21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, // 176-191
  26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, // 192-207
  19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, // 208-223
  20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, // 224-239
  26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, // 240-255
  30, //                                                              EOS
);

const EOS = 256;
const SYMBOLS = 257;
/** Shortest code is 5 bits: one 4-bit step of the decoder emits at most one symbol. */
const STEP_BITS = 4;
/** A code with 257 leaves has 256 internal nodes, so a decoder state fits in one byte. */
const STATES = 256;
/** RFC 7541 §5.2: padding is at most 7 bits. */
const MAX_PADDING_BITS = 7;

/** Codes of up to 30 bits, right-aligned, built from LENGTHS at load. */
const CODES = buildCodes();

function buildCodes(): Uint32Array {
  const order = Array.from({ length: SYMBOLS }, (_, sym) => sym);
  order.sort((a, b) => LENGTHS[a]! - LENGTHS[b]! || a - b);
  const codes = new Uint32Array(SYMBOLS);
  let code = 0;
  let length = LENGTHS[order[0]!]!;
  for (const sym of order) {
    code <<= LENGTHS[sym]! - length;
    length = LENGTHS[sym]!;
    codes[sym] = code++;
  }
  return codes;
}

/** The code of one symbol (0..256), right-aligned; exported for tests and tooling. */
export function huffmanCode(symbol: number): { code: number; length: number } {
  return { code: CODES[symbol]!, length: LENGTHS[symbol]! };
}

/**
 * Octets needed to Huffman-code `src`. A string is taken as latin1 octets (HTTP/2 field
 * values are octets); a code unit above 0xff throws, since dropping its high byte could turn
 * U+010A into LF and smuggle a line break past a check done on the string.
 */
export function huffmanEncodedLength(src: Buffer | string): number {
  // The hot path (the HPACK encoder) passes strings; one loop over one type stays monomorphic.
  const text = typeof src === 'string' ? src : src.toString('latin1');
  let bits = 0;
  for (let i = 0; i < text.length; i++) {
    const sym = text.charCodeAt(i);
    if (sym > 0xff) throw new RangeError(`code unit 0x${sym.toString(16)} at ${i} is not a latin1 octet`);
    bits += LENGTHS[sym]!;
  }
  return (bits + 7) >>> 3;
}

export function huffmanEncode(src: Buffer | string): Buffer {
  const text = typeof src === 'string' ? src : src.toString('latin1');
  const out = Buffer.allocUnsafe(huffmanEncodedLength(text));
  huffmanEncodeInto(text, out, 0);
  return out;
}

/**
 * Writes the code of `text` at `offset` and returns the offset after it; the caller has made
 * room with huffmanEncodedLength, which also rejects code units above 0xff.
 */
export function huffmanEncodeInto(text: string, out: Uint8Array, offset: number): number {
  let pos = offset;
  // Invariant: fewer than 8 pending bits in `acc` between symbols, so acc << 24 stays in int32.
  let acc = 0;
  let bits = 0;
  for (let i = 0; i < text.length; i++) {
    const sym = text.charCodeAt(i);
    let code = CODES[sym]!;
    let length = LENGTHS[sym]!;
    if (length > 24) {
      acc = (acc << (length - 16)) | (code >>> 16);
      bits += length - 16;
      for (; bits >= 8; bits -= 8) out[pos++] = acc >>> (bits - 8);
      acc &= (1 << bits) - 1;
      code &= 0xffff;
      length = 16;
    }
    acc = (acc << length) | code;
    bits += length;
    for (; bits >= 8; bits -= 8) out[pos++] = acc >>> (bits - 8);
    acc &= (1 << bits) - 1;
  }
  // RFC 7541 §5.2: pad with the most significant bits of EOS, which are all ones.
  if (bits > 0) out[pos++] = (acc << (8 - bits)) | (0xff >>> bits);
  return pos;
}

// Decoder: a state machine over the code tree that consumes 4 bits per step. A state is an
// internal node; each (state, nibble) entry packs next state | EMIT | FAIL | symbol << 16.
const EMIT = 0x100;
const FAIL = 0x200;
/** How a string may end in each state: 0 valid, else a reason (RFC 7541 §5.2). */
const END_OK = 0;
const END_LONG_PADDING = 1;
const END_NOT_EOS_PREFIX = 2;

const { steps: STEPS, ends: ENDS } = buildDecoder();

function buildTree(): Int16Array {
  // children[node * 2 + bit]: > 0 internal node, < 0 leaf -(symbol + 1), 0 not yet made.
  const children = new Int16Array(STATES * 2);
  let nodes = 1;
  for (let sym = 0; sym < SYMBOLS; sym++) {
    let node = 0;
    for (let bit = LENGTHS[sym]! - 1; bit >= 0; bit--) {
      const slot = node * 2 + ((CODES[sym]! >>> bit) & 1);
      if (bit === 0) children[slot] = -(sym + 1);
      else {
        if (children[slot] === 0) children[slot] = nodes++;
        node = children[slot]!;
      }
    }
  }
  return children;
}

function buildDecoder(): { steps: Uint32Array; ends: Uint8Array } {
  const children = buildTree();
  const steps = new Uint32Array(STATES << STEP_BITS);
  for (let state = 0; state < STATES; state++) {
    for (let nibble = 0; nibble < 1 << STEP_BITS; nibble++) {
      let node = state;
      let entry = 0;
      for (let bit = STEP_BITS - 1; bit >= 0; bit--) {
        const child = children[node * 2 + ((nibble >>> bit) & 1)]!;
        if (child > 0) node = child;
        else {
          const sym = -child - 1;
          entry = sym === EOS ? FAIL : EMIT | (sym << 16);
          node = 0;
          if (sym === EOS) break;
        }
      }
      steps[(state << STEP_BITS) | nibble] = entry | node;
    }
  }
  // Only the nodes on the all-ones path (a prefix of EOS) are valid places to stop.
  const ends = new Uint8Array(STATES).fill(END_NOT_EOS_PREFIX);
  for (let node = 0, depth = 0; node > 0 || depth === 0; depth++) {
    ends[node] = depth <= MAX_PADDING_BITS ? END_OK : END_LONG_PADDING;
    node = children[node * 2 + 1]!;
  }
  return { steps, ends };
}

/** Room a decoded string can need: every code is at least 5 bits. */
export function huffmanMaxDecodedLength(encodedLength: number): number {
  return Math.floor((encodedLength * 8) / 5);
}

/** Decodes one Huffman-coded string literal (RFC 7541 §5.2). Never throws. */
export function huffmanDecode(buf: Buffer): Result<Buffer, string> {
  const out = Buffer.allocUnsafe(huffmanMaxDecodedLength(buf.length));
  const n = huffmanDecodeInto(buf, 0, buf.length, out);
  return typeof n === 'string' ? err(n) : ok(out.subarray(0, n));
}

/**
 * Decodes src[start, end) into `out`, which has huffmanMaxDecodedLength(end - start) octets
 * of room, and returns the octet count or why the string is invalid. Never throws; this form
 * lets the HPACK decoder skip a view, a buffer and a Result per string.
 */
export function huffmanDecodeInto(
  src: Uint8Array,
  start: number,
  end: number,
  out: Uint8Array,
): number | string {
  let n = 0;
  let state = 0;
  for (let i = start; i < end; i++) {
    const byte = src[i]!;
    let entry = STEPS[(state << STEP_BITS) | (byte >>> 4)]!;
    if (entry & EMIT) out[n++] = entry >>> 16;
    entry = STEPS[((entry & 0xff) << STEP_BITS) | (byte & 0xf)]! | (entry & FAIL);
    if (entry & EMIT) out[n++] = entry >>> 16;
    if (entry & FAIL) return 'huffman string contains eos';
    state = entry & 0xff;
  }
  const ending = ENDS[state]!;
  if (ending === END_LONG_PADDING) return 'huffman padding longer than 7 bits';
  if (ending === END_NOT_EOS_PREFIX) return 'huffman padding is not a prefix of eos';
  return n;
}
