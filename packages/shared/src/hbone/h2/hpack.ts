import { err, ok, type Result } from '../../result.js';
import {
  huffmanDecodeInto,
  huffmanEncodedLength,
  huffmanEncodeInto,
  huffmanMaxDecodedLength,
} from './huffman.js';

export type HeaderField = [name: string, value: string];

export interface DecodedBlock {
  fields: HeaderField[];
  /** RFC 9113 §6.5.2 size: sum of name+value+32 */
  listBytes: number;
}

/** RFC 7541 Appendix A; HPACK index i is STATIC_TABLE[i - 1]. */
const STATIC_TABLE: readonly (readonly [string, string])[] = [
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];
const STATIC_COUNT = STATIC_TABLE.length;

/** SETTINGS_HEADER_TABLE_SIZE initial value (RFC 9113 §6.5.2). */
const DEFAULT_MAX_TABLE_SIZE = 4096;
/** Far above any CONNECT or ordinary request; a flood of tiny fields is an attack. */
const DEFAULT_MAX_FIELDS = 256;
/** One name or value; big enough for large cookies, small enough to refuse a bomb early. */
const DEFAULT_MAX_STRING_BYTES = 64 * 1024;
/** RFC 7541 §4.1: an entry costs its name and value octets plus 32. */
const ENTRY_OVERHEAD = 32;
/** RFC 7541 §5.1 integers we accept fit in an int32; no header block quantity needs more. */
const MAX_INTEGER = 2 ** 31 - 1;
/** 4 prefix bits + 5 × 7 bits covers 2^31; a sixth continuation octet is only padding. */
const MAX_INTEGER_CONTINUATIONS = 5;
/** Evicted slots are dropped from the front once this many (and half the array) are dead. */
const COMPACT_AFTER_EVICTIONS = 32;
/** Scratch buffers are kept up to this size between calls; a bigger need gets a one-off buffer. */
const MAX_RETAINED_SCRATCH = 16 * 1024;
const INITIAL_SCRATCH = 512;
const EMPTY = Buffer.alloc(0);

/** `buf`, or a bigger one when it is short of `size` (which is at most MAX_RETAINED_SCRATCH). */
function grown(buf: Buffer, size: number): Buffer {
  if (buf.length >= size) return buf;
  return Buffer.allocUnsafe(Math.min(MAX_RETAINED_SCRATCH, Math.max(size, buf.length * 2)));
}

/** RFC 7541 §2.3.2 dynamic table: FIFO, newest entry at the lowest index. */
class DynamicTable {
  // Oldest entry at `first`, newest at the end; slots before `first` are evicted.
  private names: string[] = [];
  private values: string[] = [];
  private first = 0;
  /** Invariant: size <= maxSize, the sum of entry costs (§4.1). */
  private size = 0;

  constructor(private maxSize: number) {}

  get length(): number {
    return this.names.length - this.first;
  }

  /** `i` is 0 for the newest entry. */
  name(i: number): string {
    return this.names[this.names.length - 1 - i]!;
  }

  value(i: number): string {
    return this.values[this.values.length - 1 - i]!;
  }

  insert(name: string, value: string): void {
    const cost = name.length + value.length + ENTRY_OVERHEAD;
    // §4.4: an entry larger than the whole table empties it and is not added.
    this.evictTo(this.maxSize - cost);
    if (cost > this.maxSize) return;
    this.names.push(name);
    this.values.push(value);
    this.size += cost;
  }

  /** §4.3: a smaller maximum evicts at once. */
  resize(maxSize: number): void {
    this.maxSize = maxSize;
    this.evictTo(maxSize);
  }

  private evictTo(limit: number): void {
    while (this.size > limit && this.length > 0) {
      this.size -= this.names[this.first]!.length + this.values[this.first]!.length + ENTRY_OVERHEAD;
      this.first++;
    }
    if (this.length === 0) {
      this.names = [];
      this.values = [];
      this.first = 0;
    } else if (this.first >= COMPACT_AFTER_EVICTIONS && this.first * 2 >= this.names.length) {
      this.names.splice(0, this.first);
      this.values.splice(0, this.first);
      this.first = 0;
    }
  }
}

export interface HpackDecoderOptions {
  /** Our SETTINGS_HEADER_TABLE_SIZE: the largest size update the peer may send. */
  maxTableSize?: number;
  maxFields?: number;
  /** Per name or value, before and after Huffman decoding. */
  maxStringBytes?: number;
}

/**
 * One decoder per connection direction: the dynamic table spans header blocks, so every block
 * must be decoded in order, even one the caller will refuse. Any error is a COMPRESSION_ERROR
 * (RFC 9113 §4.3) and the table is then out of step, so the connection must close.
 */
export class HpackDecoder {
  private readonly maxTableSize: number;
  private readonly maxFields: number;
  private readonly maxStringBytes: number;
  private readonly table: DynamicTable;
  // Cursor over the block being decoded; EMPTY between calls so no block is kept alive.
  private buf: Buffer = EMPTY;
  private pos = 0;
  /** Why the last internal step returned -1 or undefined. */
  private reason = '';
  /** Huffman output, reused across strings; kept only up to MAX_RETAINED_SCRATCH. */
  private scratch: Buffer = Buffer.allocUnsafe(INITIAL_SCRATCH);

  constructor(opts: HpackDecoderOptions = {}) {
    this.maxTableSize = opts.maxTableSize ?? DEFAULT_MAX_TABLE_SIZE;
    this.maxFields = opts.maxFields ?? DEFAULT_MAX_FIELDS;
    this.maxStringBytes = opts.maxStringBytes ?? DEFAULT_MAX_STRING_BYTES;
    this.table = new DynamicTable(this.maxTableSize);
  }

  /** One complete header block (HEADERS + CONTINUATION payloads joined). Never throws. */
  decode(block: Buffer): Result<DecodedBlock, string> {
    this.buf = block;
    this.pos = 0;
    const result = this.decodeBlock();
    this.buf = EMPTY;
    return result;
  }

  private decodeBlock(): Result<DecodedBlock, string> {
    const fields: HeaderField[] = [];
    let listBytes = 0;
    while (this.pos < this.buf.length) {
      if ((this.buf[this.pos]! & 0xe0) === 0x20) {
        // §4.2: size updates are only allowed before the first field of a block.
        if (fields.length > 0) return err('dynamic table size update after a header field');
        if (!this.sizeUpdate()) return err(this.reason);
        continue;
      }
      if (fields.length === this.maxFields) return err(`more than ${this.maxFields} header fields`);
      const field = this.field();
      if (field === undefined) return err(this.reason);
      fields.push(field);
      listBytes += field[0].length + field[1].length + ENTRY_OVERHEAD;
    }
    return ok({ fields, listBytes });
  }

  /** §6.3 */
  private sizeUpdate(): boolean {
    const size = this.int(5);
    if (size < 0) return false;
    if (size > this.maxTableSize) return this.fail(`table size update ${size} above ${this.maxTableSize}`);
    this.table.resize(size);
    return true;
  }

  /** §6.1 indexed, §6.2.1 with incremental indexing, §6.2.2 without, §6.2.3 never indexed. */
  private field(): HeaderField | undefined {
    const first = this.buf[this.pos]!;
    if (first & 0x80) {
      const index = this.int(7);
      if (index < 0 || !this.validIndex(index)) return undefined;
      return [this.nameAt(index), this.valueAt(index)];
    }
    const indexing = (first & 0x40) !== 0;
    const nameIndex = this.int(indexing ? 6 : 4);
    if (nameIndex < 0) return undefined;
    let name: string | undefined;
    if (nameIndex === 0) name = this.string();
    else if (this.validIndex(nameIndex)) name = this.nameAt(nameIndex);
    if (name === undefined) return undefined;
    const value = this.string();
    if (value === undefined) return undefined;
    if (indexing) this.table.insert(name, value);
    return [name, value];
  }

  /** §2.3.3: index 0 is never valid; the dynamic table follows the 61 static entries. */
  private validIndex(index: number): boolean {
    if (index === 0) return this.fail('index 0 is not allowed');
    if (index > STATIC_COUNT + this.table.length) return this.fail(`index ${index} out of range`);
    return true;
  }

  private nameAt(index: number): string {
    return index <= STATIC_COUNT ? STATIC_TABLE[index - 1]![0] : this.table.name(index - STATIC_COUNT - 1);
  }

  private valueAt(index: number): string {
    return index <= STATIC_COUNT ? STATIC_TABLE[index - 1]![1] : this.table.value(index - STATIC_COUNT - 1);
  }

  /** §5.1 integer whose prefix is the low `prefixBits` of the current octet; -1 on error. */
  private int(prefixBits: number): number {
    const mask = (1 << prefixBits) - 1;
    let value = this.buf[this.pos++]! & mask;
    if (value < mask) return value;
    for (let n = 0; n < MAX_INTEGER_CONTINUATIONS; n++) {
      if (this.pos >= this.buf.length) return this.failInt('truncated integer');
      const octet = this.buf[this.pos++]!;
      value += (octet & 0x7f) * 2 ** (7 * n);
      if (value > MAX_INTEGER) return this.failInt('integer above 2^31 - 1');
      if ((octet & 0x80) === 0) return value;
    }
    return this.failInt(`integer longer than ${MAX_INTEGER_CONTINUATIONS} continuation octets`);
  }

  /** §5.2 string literal, raw or Huffman-coded, as latin1 (field values are octets). */
  private string(): string | undefined {
    if (this.pos >= this.buf.length) return this.failString('truncated string literal');
    const huffman = (this.buf[this.pos]! & 0x80) !== 0;
    const length = this.int(7);
    if (length < 0) return undefined;
    if (length > this.maxStringBytes) return this.failString(`string of ${length} octets too long`);
    const start = this.pos;
    if (start + length > this.buf.length) return this.failString('truncated string literal');
    this.pos += length;
    if (!huffman) return this.buf.toString('latin1', start, this.pos);
    const room = huffmanMaxDecodedLength(length);
    const out = room <= MAX_RETAINED_SCRATCH ? this.scratchOf(room) : Buffer.allocUnsafe(room);
    const decoded = huffmanDecodeInto(this.buf, start, this.pos, out);
    if (typeof decoded === 'string') return this.failString(decoded);
    if (decoded > this.maxStringBytes) return this.failString(`string of ${decoded} octets too long`);
    return out.toString('latin1', 0, decoded);
  }

  private scratchOf(size: number): Buffer {
    this.scratch = grown(this.scratch, size);
    return this.scratch;
  }

  private fail(reason: string): false {
    this.reason = reason;
    return false;
  }

  private failInt(reason: string): -1 {
    this.reason = reason;
    return -1;
  }

  private failString(reason: string): undefined {
    this.reason = reason;
    return undefined;
  }
}

/** name → its lowest static index, and the full-match index of each static value. */
const STATIC_BY_NAME = new Map<string, { index: number; values: Map<string, number> }>();
STATIC_TABLE.forEach(([name, value], i) => {
  if (!STATIC_BY_NAME.has(name)) STATIC_BY_NAME.set(name, { index: i + 1, values: new Map() });
  STATIC_BY_NAME.get(name)!.values.set(value, i + 1);
});

/** Besides the name and value octets: a type octet and two 6-octet length prefixes (§5.1). */
const MAX_FIELD_OVERHEAD = 13;
/** §6.3: pattern 001 and a 5-bit size of 0. */
const SIZE_UPDATE_TO_ZERO = 0x20;

/**
 * Never adds to the dynamic table: every field is a static full match (§6.1) or a literal
 * without indexing (§6.2.2). Blocks must still be sent in the order they were encoded.
 */
export class HpackEncoder {
  private scratch: Buffer = Buffer.allocUnsafe(INITIAL_SCRATCH);
  /**
   * The first block starts with a size update to 0 (§6.3). A peer that lowers its
   * SETTINGS_HEADER_TABLE_SIZE below 4096 expects one in the next block (nghttp2 answers
   * COMPRESSION_ERROR without it); once the peer's table is 0 no setting can lower it further.
   */
  private sentSizeUpdate = false;

  /** Encodes a header list; names must already be lowercase. */
  encode(fields: readonly HeaderField[]): Buffer {
    let bound = 1;
    for (let i = 0; i < fields.length; i++) {
      const field = fields[i]!;
      bound += MAX_FIELD_OVERHEAD + field[0].length + field[1].length;
    }
    const out = bound <= MAX_RETAINED_SCRATCH ? this.scratchOf(bound) : Buffer.allocUnsafe(bound);
    let pos = 0;
    if (!this.sentSizeUpdate) out[pos++] = SIZE_UPDATE_TO_ZERO;
    for (let i = 0; i < fields.length; i++) {
      const field = fields[i]!;
      pos = writeField(out, pos, field[0], field[1]);
    }
    // Only once a block is returned: a field that threw must not swallow the size update.
    this.sentSizeUpdate = true;
    const block = Buffer.allocUnsafe(pos);
    out.copy(block, 0, 0, pos);
    return block;
  }

  private scratchOf(size: number): Buffer {
    this.scratch = grown(this.scratch, size);
    return this.scratch;
  }
}

function writeField(out: Buffer, pos: number, name: string, value: string): number {
  const byName = STATIC_BY_NAME.get(name);
  if (byName === undefined) {
    out[pos] = 0x00;
    pos = writeString(out, pos + 1, name);
  } else {
    const full = byName.values.get(value);
    if (full !== undefined) return writeInt(out, pos, full, 7, 0x80);
    pos = writeInt(out, pos, byName.index, 4, 0x00);
  }
  return writeString(out, pos, value);
}

/** §5.2: Huffman only when strictly shorter; on a tie raw octets spare the peer the decoding. */
function writeString(out: Buffer, pos: number, s: string): number {
  const huffmanLength = huffmanEncodedLength(s);
  if (huffmanLength < s.length) {
    return huffmanEncodeInto(s, out, writeInt(out, pos, huffmanLength, 7, 0x80));
  }
  pos = writeInt(out, pos, s.length, 7, 0x00);
  return pos + out.write(s, pos, 'latin1');
}

/** §5.1: `flags` fills the octet's bits above the prefix. */
function writeInt(out: Buffer, pos: number, value: number, prefixBits: number, flags: number): number {
  const mask = (1 << prefixBits) - 1;
  if (value < mask) {
    out[pos] = flags | value;
    return pos + 1;
  }
  out[pos++] = flags | mask;
  let rest = value - mask;
  for (; rest >= 0x80; rest >>>= 7) out[pos++] = (rest & 0x7f) | 0x80;
  out[pos++] = rest;
  return pos;
}
