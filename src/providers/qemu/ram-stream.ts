// QEMU's migration stream, read as it passes: a header, the configuration, then sections. The RAM
// section's pages are records of a big-endian 64-bit word (the page's offset in its block, flags in
// the low 12 bits), the block's name unless CONTINUE says "the same block as before", then a fill
// byte (ZERO) or the page (PAGE). Device sections are not self-delimiting, but they only come after
// the last RAM section; from the first of them on, the stream is passed as it is. Anything else
// this parser does not know (a RAM record in a form it cannot size) fails the read rather than
// guess. ram-delta.ts filters pages with it.
import { open } from "node:fs/promises";

const MAGIC = 0x5145564d; // "QEVM"
const VERSION = 3;
const SECTION_START = 0x01;
const SECTION_PART = 0x02;
const SECTION_END = 0x03;
const SUBSECTION = 0x05;
const CONFIGURATION = 0x07;
const SECTION_FOOTER = 0x7e;
const FLAG_ZERO = 0x02;
const FLAG_MEM_SIZE = 0x04;
const FLAG_PAGE = 0x08;
const FLAG_EOS = 0x10;
const FLAG_CONTINUE = 0x20;
const FLAG_BITS = 0xfffn;
/** The capability under which RAM a file backs is left out of the stream altogether. */
const IGNORE_SHARED = "x-ignore-shared";

export const PAGE_BYTES = 4096;

/** Passed to the parser instead of a byte count: everything from here on is passed as it is. */
const REST = -1;
/** Asked by the parser at a RAM round: the driver reads its records, to their end mark (the hot path). */
const RECORDS = -2;

type Parser = Generator<number, void, Buffer>;

export interface Hooks {
  /** Gets the filtered stream in pieces, each valid only until the `push` that made it returns. */
  out(b: Buffer): void;
  /** Whether a RAM record must stay: its page is `data[at, at + PAGE_BYTES)`, or zeros when `at` is -1. */
  keep(block: string, offset: number, data: Buffer, at: number): boolean;
  capabilities?(names: string[]): void;
  /** The first RAM section starts: what comes before it is the header and configuration. */
  ramStarts?(): void;
}

const be64 = (b: Buffer) => b.readBigUInt64BE(0);

function* configuration(h: Hooks): Parser {
  const len = yield 4;
  h.out(len);
  h.out(yield len.readUInt32BE(0)); // the machine type's name
}

/** A configuration subsection (after its marker byte): the ones QEMU 7.2 and later write. */
function* subsection(h: Hooks): Parser {
  const len = yield 1;
  const name = yield len[0];
  const version = yield 4;
  h.out(len);
  h.out(name);
  h.out(version);
  switch (name.toString("latin1")) {
    case "configuration/capabilities": {
      const count = yield 4;
      h.out(count);
      const names: string[] = [];
      for (let i = count.readUInt32BE(0); i > 0; i--) {
        const l = yield 1;
        const cap = yield l[0];
        h.out(l);
        h.out(cap);
        names.push(cap.toString("latin1"));
      }
      h.capabilities?.(names);
      return;
    }
    case "configuration/target-page-bits":
      h.out(yield 4);
      return;
    case "configuration/uuid":
      h.out(yield 16);
      return;
    default:
      // Unknown and of unknown length: RAM cannot be found after it, so nothing is left out.
      yield REST;
  }
}

/** The RAM section's setup (after its header): the blocks and their sizes, to the end mark. */
function* ramSetup(h: Hooks, ignoreShared: boolean): Parser {
  const first = yield 8;
  h.out(first);
  const word = be64(first);
  if (!(Number(word & FLAG_BITS) & FLAG_MEM_SIZE)) throw new Error("the RAM section does not start with its size");
  const total = word & ~FLAG_BITS;
  let seen = 0n;
  while (seen < total) {
    const len = yield 1;
    h.out(len);
    h.out(yield len[0]);
    const used = yield 8;
    h.out(used);
    seen += be64(used);
    if (ignoreShared) h.out(yield 8); // the block's guest address
  }
  const eos = yield 8;
  h.out(eos);
  if (Number(be64(eos) & FLAG_BITS) !== FLAG_EOS) throw new Error("the RAM setup does not end where its blocks do");
}

function* stream(h: Hooks): Parser {
  const head = yield 8;
  if (head.readUInt32BE(0) !== MAGIC || head.readUInt32BE(4) !== VERSION) throw new Error("not a QEMU migration stream (version 3)");
  h.out(head);
  let ramId = -1;
  let ignoreShared = false;
  const hooks: Hooks = {
    ...h,
    capabilities(names) {
      ignoreShared = names.includes(IGNORE_SHARED);
      h.capabilities?.(names);
    },
  };
  for (;;) {
    const kind = yield 1;
    switch (kind[0]) {
      case CONFIGURATION:
        h.out(kind);
        yield* configuration(hooks);
        break;
      case SUBSECTION:
        h.out(kind);
        yield* subsection(hooks);
        break;
      case SECTION_FOOTER:
        h.out(kind);
        h.out(yield 4);
        break;
      case SECTION_START: {
        const id = yield 4;
        const len = yield 1;
        const name = yield len[0];
        const instanceVersion = yield 8;
        const isRam = name.toString("latin1") === "ram" && ramId === -1;
        if (isRam) h.ramStarts?.();
        for (const b of [kind, id, len, name, instanceVersion]) h.out(b);
        if (!isRam) {
          yield REST; // another iterable section: its data cannot be skipped
          return;
        }
        ramId = id.readUInt32BE(0);
        yield* ramSetup(h, ignoreShared);
        break;
      }
      case SECTION_PART:
      case SECTION_END: {
        const id = yield 4;
        h.out(kind);
        h.out(id);
        if (id.readUInt32BE(0) !== ramId) {
          yield REST;
          return;
        }
        yield RECORDS;
        break;
      }
      default:
        // A device's section, the end of the stream: no RAM record comes after it.
        h.out(kind);
        yield REST;
        return;
    }
  }
}

/**
 * Drives the parser with chunks as they arrive, kept in one contiguous buffer: the parser asks
 * for byte counts and gets exactly those, or for the rest, which then goes to `out`
 * unparsed. RAM records, a hundred thousand per stream, are read here in a loop that allocates
 * nothing per record.
 */
export class StreamFilter {
  private readonly parser: Parser;
  private want: number;
  private buf: Buffer = Buffer.alloc(0);
  private pos = 0;
  private readonly scratch = [Buffer.alloc(0), Buffer.alloc(0)];
  private turn = 0;
  private rest = false;
  private ended = false;
  private records = false;
  /** The block the last record read named, which a record that continues refers to (across rounds too). */
  private block = "";
  /** The block the last record written named: each round names it again. */
  private written = "";

  constructor(private readonly hooks: Hooks) {
    this.parser = stream(hooks);
    this.want = this.parser.next().value as number;
  }

  push(chunk: Buffer): void {
    if (this.rest) {
      this.hooks.out(chunk);
      return;
    }
    if (this.ended) throw new Error("the migration stream goes on after its end");
    this.append(chunk);
    for (;;) {
      if (this.records) {
        if (!this.readRecords()) break;
        this.records = false;
        this.advance(this.parser.next());
      } else if (this.buf.length - this.pos >= this.want) {
        // A copy: the parser keeps pieces across requests, and the buffer is reused (a cold path).
        const piece = Buffer.from(this.buf.subarray(this.pos, this.pos + this.want));
        this.pos += this.want;
        this.advance(this.parser.next(piece));
      } else break;
      if (this.rest || this.ended) break;
    }
    if (this.rest && this.pos < this.buf.length) {
      this.hooks.out(this.buf.subarray(this.pos));
      this.pos = this.buf.length;
    }
  }

  /** The stream has ended: it must have ended where a record does. */
  end(): void {
    if (!this.rest && (this.pos < this.buf.length || !this.ended)) throw new Error("the migration stream ended inside a record");
  }

  private advance(next: IteratorResult<number, void>): void {
    if (next.done) this.ended = true;
    else if (next.value === REST) this.rest = true;
    else if (next.value === RECORDS) {
      this.records = true;
      this.written = "";
    } else this.want = next.value;
  }

  /**
   * Keeps what is unread and adds `chunk`: the chunk itself when nothing is left over, else both
   * copied into one of two buffers of ours used in turn, never the one being read from (a chunk
   * is never written into: the caller may still be sending it elsewhere).
   */
  private append(chunk: Buffer): void {
    const left = this.buf.length - this.pos;
    this.pos = 0;
    if (left === 0) {
      this.buf = chunk;
      return;
    }
    this.turn ^= 1;
    let into = this.scratch[this.turn];
    if (into.length < left + chunk.length) into = this.scratch[this.turn] = Buffer.allocUnsafe(Math.max(left + chunk.length, 256 * 1024));
    this.buf.copy(into, 0, this.buf.length - left);
    chunk.copy(into, left);
    this.buf = into.subarray(0, left + chunk.length);
  }

  /** Reads whole records to the round's end mark (true) or as far as the data goes (false). */
  private readRecords(): boolean {
    const b = this.buf;
    const end = b.length;
    const { out, keep } = this.hooks;
    let i = this.pos;
    try {
      for (;;) {
        if (end - i < 8) return false;
        const hi = b.readUInt32BE(i);
        const lo = b.readUInt32BE(i + 4);
        const flags = lo & 0xfff;
        if (flags & FLAG_EOS) {
          out(b.subarray(i, i + 8));
          i += 8;
          return true;
        }
        let j = i + 8;
        let block = this.block;
        if (!(flags & FLAG_CONTINUE)) {
          if (end - j < 1 || end - j < 1 + b[j]) return false;
          block = b.toString("latin1", j + 1, j + 1 + b[j]);
          j += 1 + b[j];
        } else if (!block) throw new Error("a RAM record continues a block no record named");
        const size = flags & FLAG_ZERO ? 1 : flags & FLAG_PAGE ? PAGE_BYTES : -1;
        if (size < 0) throw new Error(`a RAM record with flags 0x${flags.toString(16)}, which this filter cannot size`);
        if (end - j < size) return false;
        this.block = block;
        const offset = hi * 2 ** 32 + (lo - flags);
        if (keep(block, offset, b, size === 1 ? -1 : j)) {
          const head = Buffer.allocUnsafe(8);
          head.writeUInt32BE(hi, 0);
          if (block === this.written) {
            head.writeUInt32BE((lo | FLAG_CONTINUE) >>> 0, 4);
            out(head);
          } else {
            head.writeUInt32BE((lo & ~FLAG_CONTINUE) >>> 0, 4);
            const name = Buffer.from(block, "latin1");
            out(head);
            out(Buffer.from([name.length]));
            out(name);
            this.written = block;
          }
          out(b.subarray(j, j + size));
        }
        i = j + size;
      }
    } finally {
      this.pos = i;
    }
  }
}

/**
 * Whether a saved stream leaves RAM a file backs out (x-ignore-shared: a snapshot whose RAM is
 * its file), or carries RAM pages to load over it (a pause that stored what changed). The
 * restoring QEMU must be set the same way, or it refuses the stream.
 */
export async function leavesSharedRamOut(state: string): Promise<boolean> {
  const fh = await open(state, "r");
  try {
    // The configuration and the RAM section's start are the stream's first few hundred bytes;
    // this runs at every restore from a RAM file (each spawn from a base), so it reads no more.
    const head = Buffer.alloc(4096);
    const { bytesRead } = await fh.read(head, 0, head.length, 0);
    let found: boolean | null = null;
    const filter = new StreamFilter({
      out() {},
      keep: () => true,
      capabilities: (names) => (found = names.includes(IGNORE_SHARED)),
      ramStarts: () => (found ??= false),
    });
    try {
      filter.push(head.subarray(0, bytesRead));
    } catch (e) {
      if (found === null) throw e;
    }
    if (found === null) throw new Error(`${state}: no configuration or RAM section in its first ${bytesRead} bytes`);
    return found;
  } finally {
    await fh.close();
  }
}
