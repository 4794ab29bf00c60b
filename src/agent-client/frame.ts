// Wire framing of the host↔guest protocol (see docs/protocol.md). A frame is a 12-byte
// little-endian header — payload length, stream id, kind, channel, flags, reserved — followed
// by the payload. The guest is untrusted: the decoder bounds every length before buffering.

export const HEADER_SIZE = 12;
/** Largest payload either side may send; a larger header means a broken or hostile peer. */
export const MAX_PAYLOAD = 1 << 20;
/** Credit each stream starts with, in bytes, before the receiver grants more. */
export const INITIAL_WINDOW = 1024 * 1024;
/** Largest DATA payload the host sends. */
export const DATA_CHUNK = 64 * 1024;

export const Kind = {
  Hello: 1,
  Request: 2,
  Response: 3,
  Data: 4,
  Window: 5,
  Event: 6,
} as const;
export type KindValue = (typeof Kind)[keyof typeof Kind];

export const Channel = { Stdin: 0, Stdout: 1, Stderr: 2 } as const;
export const Flag = { Eof: 1 } as const;

export interface Frame {
  id: number;
  kind: number;
  channel: number;
  flags: number;
  payload: Buffer;
}

export class ProtocolError extends Error {
  override name = "ProtocolError";
}

/** Encodes one frame; the payload must not exceed MAX_PAYLOAD. */
export function encodeFrame(id: number, kind: number, channel: number, flags: number, payload?: Uint8Array): Buffer {
  const len = payload?.length ?? 0;
  if (len > MAX_PAYLOAD) throw new ProtocolError(`frame payload of ${len} bytes exceeds ${MAX_PAYLOAD}`);
  const buf = Buffer.allocUnsafe(HEADER_SIZE + len);
  buf.writeUInt32LE(len, 0);
  buf.writeUInt32LE(id >>> 0, 4);
  buf.writeUInt8(kind, 8);
  buf.writeUInt8(channel, 9);
  buf.writeUInt8(flags, 10);
  buf.writeUInt8(0, 11);
  if (payload && len) buf.set(payload, HEADER_SIZE);
  return buf;
}

/** Encodes a JSON message frame (request, response or event). */
export function encodeJson(id: number, kind: number, body: unknown): Buffer {
  return encodeFrame(id, kind, 0, 0, Buffer.from(JSON.stringify(body), "utf8"));
}

/** Incremental decoder: feed it chunks, get whole frames; throws ProtocolError on a bad header. */
// What a HELLO frame looks like from its 5th byte on: stream id 0, kind HELLO, channel, flags
// and reserved 0, then the JSON reply. Used to find a frame boundary in a stream joined midway.
const HELLO_MARK = Buffer.concat([Buffer.from([0, 0, 0, 0, Kind.Hello, 0, 0, 0]), Buffer.from('{"ok":true,"proto":')]);

export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;

  /**
   * @param resync discard bytes until the first HELLO frame: for re-attaching to a guest whose
   *   byte stream may have been left mid-frame by a previous host.
   */
  constructor(
    private readonly maxPayload = MAX_PAYLOAD,
    private resync = false,
  ) {}

  push(chunk: Buffer): Frame[] {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    if (this.resync && !this.findHello()) return [];
    const out: Frame[] = [];
    for (;;) {
      if (this.buffered < HEADER_SIZE) break;
      const head = this.peek(HEADER_SIZE);
      const len = head.readUInt32LE(0);
      if (len > this.maxPayload) throw new ProtocolError(`peer sent a frame of ${len} bytes (limit ${this.maxPayload})`);
      const kind = head.readUInt8(8);
      if (kind < Kind.Hello || kind > Kind.Event) throw new ProtocolError(`peer sent an unknown frame kind ${kind}`);
      if (this.buffered < HEADER_SIZE + len) break;
      const whole = this.take(HEADER_SIZE + len);
      out.push({
        id: whole.readUInt32LE(4),
        kind,
        channel: whole.readUInt8(9),
        flags: whole.readUInt8(10),
        payload: whole.subarray(HEADER_SIZE),
      });
    }
    return out;
  }

  // Drops bytes before the first HELLO header; keeps a short tail when none is there yet.
  private findHello(): boolean {
    const all = Buffer.concat(this.chunks);
    const at = all.indexOf(HELLO_MARK);
    if (at >= 4) {
      this.chunks = [all.subarray(at - 4)];
      this.buffered = all.length - (at - 4);
      this.resync = false;
      return true;
    }
    const keep = all.subarray(Math.max(0, all.length - HELLO_MARK.length - 4));
    this.chunks = [keep];
    this.buffered = keep.length;
    return false;
  }

  /** Bytes held waiting for the rest of a frame. */
  get pending(): number {
    return this.buffered;
  }

  private peek(n: number): Buffer {
    if (this.chunks[0].length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0].subarray(0, n);
  }

  private take(n: number): Buffer {
    if (this.chunks[0].length < n) this.chunks = [Buffer.concat(this.chunks)];
    const first = this.chunks[0];
    const out = first.subarray(0, n);
    if (first.length === n) this.chunks.shift();
    else this.chunks[0] = first.subarray(n);
    this.buffered -= n;
    return out;
  }
}
