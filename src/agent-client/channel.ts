// The host end of one VM's agent channel: multiplexes concurrent requests and streams over a
// single byte stream (the virtio-serial port's unix socket). Anything malformed from the guest
// closes this channel and only this channel.
import { randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";
import type { Duplex } from "node:stream";
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import { Channel, Flag, FrameDecoder, Kind, MAX_PAYLOAD, ProtocolError, encodeFrame, encodeJson, type Frame } from "./frame.js";
import { AgentError, AgentTimeoutError, ChannelClosedError } from "./errors.js";
import { IncomingStream, OutgoingStream } from "./streams.js";
import type {
  ErrorReply,
  ExecRequest,
  ExecResult,
  ExecStarted,
  FileStat,
  Hello,
  ListenRequest,
  ConnectRequest,
  ReadRequest,
  SimpleOps,
  TcpEvent,
  WriteRequest,
} from "./messages.js";

interface Pending {
  resolve(body: any): void;
  reject(err: Error): void;
  onEvent?(body: any): void;
  incoming?: Map<number, IncomingStream>;
  outgoing?: OutgoingStream;
  timer?: NodeJS.Timeout;
}

export interface RequestOptions {
  /** Reject with AgentTimeoutError after this many ms (the guest-side work is not cancelled). */
  timeoutMs?: number;
}

/** A running process in the guest. Consume stdout and stderr, or the process stalls on credit. */
export interface ExecSession {
  readonly id: number;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** Present when the request asked for stdin. */
  readonly stdin: OutgoingStream | null;
  readonly started: Promise<ExecStarted>;
  readonly result: Promise<ExecResult>;
  signal(sig: number): Promise<void>;
  resize(rows: number, cols: number): Promise<void>;
}

export interface BufferedExecResult extends ExecResult {
  stdout: Buffer;
  stderr: Buffer;
  /** True when output beyond maxOutputBytes was discarded. */
  truncated: boolean;
}

export interface ReadFileStream {
  readonly stream: Readable;
  /** Metadata of the file, known before the first byte arrives. */
  readonly stat: Promise<FileStat>;
  readonly done: Promise<{ size: number }>;
}

/** A TCP connection inside the guest, carried over the channel. */
export interface Tunnel {
  readonly id: number;
  /** Bytes the guest side sends; ends when it half-closes. */
  readonly incoming: Readable;
  /** Bytes for the guest side; ending it half-closes the guest socket. */
  readonly outgoing: OutgoingStream;
  /** Resolves once the guest socket is connected; rejects if it cannot be. */
  readonly connected: Promise<void>;
  /** Settles when the guest socket is done in both directions or closed. */
  readonly done: Promise<unknown>;
  /** Closes the guest socket at once. */
  close(): void;
}

/** A TCP listener inside the guest; each accepted connection is offered as a `conn` number. */
export interface GuestListener {
  readonly id: number;
  readonly listening: Promise<void>;
  readonly done: Promise<unknown>;
  close(): void;
}

export class AgentChannel extends EventEmitter {
  private readonly decoder: FrameDecoder;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closedWith: Error | null = null;
  private helloResolve!: (h: Hello) => void;
  private helloReject!: (e: Error) => void;
  /** Resolves with the agent's first hello; rejects if the channel closes first. */
  readonly hello: Promise<Hello>;

  private readonly nonce: string | null;

  /**
   * With `resync`, bytes before the guest's next HELLO are skipped (re-attaching to a VM). With
   * `introduce`, the host speaks first: it sends a HELLO with a nonce and waits for the guest's
   * HELLO that echoes it, skipping whatever the guest had in flight before — the way to take
   * over a guest restored from a snapshot, which still believes its old host is there.
   */
  constructor(
    private readonly socket: Duplex,
    opts: { resync?: boolean; introduce?: boolean } = {},
  ) {
    super();
    // Every sandbox of a shared (pool-mode) VM watches its channel close.
    this.setMaxListeners(0);
    this.nonce = opts.introduce ? randomBytes(16).toString("hex") : null;
    this.decoder = new FrameDecoder(undefined, opts.resync || opts.introduce || false);
    this.hello = new Promise<Hello>((res, rej) => {
      this.helloResolve = res;
      this.helloReject = rej;
    });
    this.hello.catch(() => {});
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", (err) => this.close(new ChannelClosedError(`agent channel failed: ${err.message}`)));
    socket.on("close", () => this.close(new ChannelClosedError("agent channel closed")));
    if (this.nonce) socket.write(encodeJson(0, Kind.Hello, { nonce: this.nonce }));
  }

  get isOpen(): boolean {
    return this.closedWith === null;
  }

  /** Why the channel closed, or null while open. */
  get closeReason(): Error | null {
    return this.closedWith;
  }

  /** Sends a simple request and resolves with the guest's reply. */
  request<K extends keyof SimpleOps>(req: SimpleOps[K]["req"], opts: RequestOptions = {}): Promise<SimpleOps[K]["res"]> {
    return this.start(req, {}, opts).result;
  }

  /** Starts a process; stdout and stderr arrive as they are produced. */
  exec(req: Omit<ExecRequest, "op">): ExecSession {
    const stdout = new IncomingStream((n) => this.grant(id, Channel.Stdout, n));
    const stderr = new IncomingStream((n) => this.grant(id, Channel.Stderr, n));
    const stdin = req.stdin ? this.outgoing(() => id) : null;
    let onStarted!: (s: ExecStarted) => void;
    let notStarted!: (e: Error) => void;
    const started = new Promise<ExecStarted>((res, rej) => {
      onStarted = res;
      notStarted = rej;
    });
    started.catch(() => {});
    const { id, result } = this.start({ ...req, op: "exec" }, {
      incoming: new Map([
        [Channel.Stdout, stdout],
        [Channel.Stderr, stderr],
      ]),
      outgoing: stdin ?? undefined,
      onEvent: (ev) => ev?.event === "started" && onStarted(ev),
    });
    // A process that never started (refused, or the channel closed) ends its `started` too.
    result.catch((e: Error) => notStarted(e));
    return {
      id,
      stdout,
      stderr,
      stdin,
      started,
      result,
      signal: async (sig) => {
        await this.request<"signal">({ op: "signal", target: id, signal: sig });
      },
      resize: async (rows, cols) => {
        await this.request<"resize">({ op: "resize", target: id, rows, cols });
      },
    };
  }

  /** Runs a process to completion, collecting at most maxOutputBytes of each stream. */
  async execBuffered(
    req: Omit<ExecRequest, "op" | "stdin">,
    opts: { stdin?: Uint8Array | string; maxOutputBytes?: number } = {},
  ): Promise<BufferedExecResult> {
    const max = opts.maxOutputBytes ?? 64 * 1024 * 1024;
    const s = this.exec({ ...req, stdin: opts.stdin !== undefined });
    let truncated = false;
    const collect = async (r: Readable) => {
      const parts: Buffer[] = [];
      let size = 0;
      for await (const c of r as AsyncIterable<Buffer>) {
        if (size >= max) { truncated = true; continue; }
        const take = c.subarray(0, max - size);
        if (take.length < c.length) truncated = true;
        parts.push(take);
        size += take.length;
      }
      return Buffer.concat(parts);
    };
    const feeding = s.stdin ? pipeline(Readable.from([Buffer.from(opts.stdin!)]), s.stdin).catch(() => {}) : null;
    const [stdout, stderr, res] = await Promise.all([collect(s.stdout), collect(s.stderr), s.result]);
    await feeding;
    return { ...res, stdout, stderr, truncated };
  }

  /** Writes a file atomically in the guest from bytes or a stream of chunks. */
  async writeFile(
    path: string,
    data: Uint8Array | string | AsyncIterable<Uint8Array> | Readable,
    opts: Omit<WriteRequest, "op" | "path"> = {},
  ): Promise<{ size: number }> {
    const out = this.outgoing(() => id);
    const { id, result } = this.start({ ...opts, op: "write", path }, { outgoing: out });
    result.catch(() => {});
    const source =
      typeof data === "string" || data instanceof Uint8Array ? Readable.from([Buffer.from(data)]) : Readable.from(data);
    // If the guest refuses (e.g. ENOENT), the result rejects first; stop feeding then.
    const feeding = pipeline(source, out).catch((e) => e);
    const res = (await Promise.race([result, feeding.then(() => result)])) as { size: number };
    await feeding;
    return { size: res.size };
  }

  /** Streams a file out of the guest; the stream applies backpressure to the guest. */
  readFile(path: string, opts: Omit<ReadRequest, "op" | "path"> = {}): ReadFileStream {
    const stream = new IncomingStream((n) => this.grant(id, Channel.Stdout, n));
    let onStat!: (s: FileStat) => void;
    const stat = new Promise<FileStat>((r) => (onStat = r));
    const { id, result } = this.start({ ...opts, op: "read", path }, {
      incoming: new Map([[Channel.Stdout, stream]]),
      onEvent: (ev) => ev?.event === "stat" && onStat(ev),
    });
    result.catch(() => {});
    stat.catch(() => {});
    return { stream, stat, done: result as Promise<{ size: number }> };
  }

  /** Reads a whole file into memory, refusing files larger than maxBytes. */
  async readFileBuffer(path: string, maxBytes = 256 * 1024 * 1024, opts: Omit<ReadRequest, "op" | "path"> = {}): Promise<Buffer> {
    const r = this.readFile(path, opts);
    const parts: Buffer[] = [];
    let size = 0;
    const st = await Promise.race([r.stat, r.done.then(() => null)]);
    if (st && st.size > maxBytes) {
      r.stream.destroy();
      throw new AgentError("EFBIG", `${path} is ${st.size} bytes, more than the ${maxBytes} byte limit`);
    }
    for await (const c of r.stream as AsyncIterable<Buffer>) {
      size += c.length;
      if (size > maxBytes) {
        r.stream.destroy();
        throw new AgentError("EFBIG", `${path} grew beyond the ${maxBytes} byte limit while reading`);
      }
      parts.push(c);
    }
    await r.done;
    return Buffer.concat(parts);
  }

  /** Opens a TCP tunnel to a guest port, or onto a connection a guest listener accepted. */
  connect(req: Omit<ConnectRequest, "op">): Tunnel {
    const incoming = new IncomingStream((n) => this.grant(id, Channel.Stdout, n));
    const outgoing = this.outgoing(() => id);
    let onConnected!: () => void;
    const connected = new Promise<void>((r) => (onConnected = r));
    const { id, result } = this.start({ ...req, op: "connect" }, {
      incoming: new Map([[Channel.Stdout, incoming]]),
      outgoing,
      onEvent: (ev: TcpEvent) => ev?.event === "connected" && onConnected(),
    });
    result.catch(() => {});
    const settled = Promise.race([connected, result]);
    settled.catch(() => {});
    return {
      id,
      incoming,
      outgoing,
      connected: settled.then(() => undefined),
      done: result,
      close: () => this.closeStream(id),
    };
  }

  /** Listens on a guest TCP port; onAccept gets each connection to claim with connect({conn}). */
  listen(req: Omit<ListenRequest, "op">, onAccept: (conn: number) => void): GuestListener {
    let onListening!: () => void;
    const listening = new Promise<void>((r) => (onListening = r));
    const { id, result } = this.start({ ...req, op: "listen" }, {
      onEvent: (ev: TcpEvent) => {
        if (ev?.event === "listening") onListening();
        else if (ev?.event === "accept" && Number.isSafeInteger(ev.conn) && ev.conn > 0) onAccept(ev.conn);
      },
    });
    result.catch(() => {});
    const settled = Promise.race([listening, result]);
    settled.catch(() => {});
    return { id, listening: settled.then(() => undefined), done: result, close: () => this.closeStream(id) };
  }

  private closeStream(id: number): void {
    if (!this.isOpen || !this.pending.has(id)) return;
    this.request<"close">({ op: "close", target: id }).catch(() => {});
  }

  /** Closes the channel; every request in flight fails with the reason. */
  close(reason: Error = new ChannelClosedError("agent channel closed")): void {
    if (this.closedWith) return;
    this.closedWith = reason;
    this.socket.destroy();
    this.helloReject(reason);
    for (const [, p] of this.pending) this.fail(p, reason);
    this.pending.clear();
    this.emit("close", reason);
  }

  private start(body: object, p: Omit<Pending, "resolve" | "reject">, opts: RequestOptions = {}) {
    const id = this.allocId();
    const result = new Promise<any>((resolve, reject) => {
      if (this.closedWith) return reject(this.closedWith);
      const payload = Buffer.from(JSON.stringify(body), "utf8");
      if (payload.length > MAX_PAYLOAD) return reject(new AgentError("E2BIG", `the request is ${payload.length} bytes, more than the ${MAX_PAYLOAD} bytes one message to the guest may have`));
      const entry: Pending = { ...p, resolve, reject };
      if (opts.timeoutMs) {
        entry.timer = setTimeout(() => {
          this.pending.delete(id);
          this.fail(entry, new AgentTimeoutError(`guest did not answer "${(body as any).op}" within ${opts.timeoutMs} ms`));
        }, opts.timeoutMs);
      }
      this.pending.set(id, entry);
      this.socket.write(encodeFrame(id, Kind.Request, 0, 0, payload));
    });
    return { id, result };
  }

  private outgoing(id: () => number): OutgoingStream {
    return new OutgoingStream(
      (chunk, eof) => {
        if (this.isOpen) this.socket.write(encodeFrame(id(), Kind.Data, Channel.Stdin, eof ? Flag.Eof : 0, chunk ?? undefined));
      },
      () => this.isOpen && this.pending.has(id()),
    );
  }

  private allocId(): number {
    do {
      this.nextId = this.nextId >= 0xffffffff ? 1 : this.nextId + 1;
    } while (this.pending.has(this.nextId));
    return this.nextId;
  }

  private grant(id: number, channel: number, n: number): void {
    if (!this.isOpen || !this.pending.has(id) || n <= 0) return;
    const p = Buffer.allocUnsafe(4);
    p.writeUInt32LE(n, 0);
    this.socket.write(encodeFrame(id, Kind.Window, channel, 0, p));
  }

  private fail(p: Pending, err: Error): void {
    if (p.timer) clearTimeout(p.timer);
    // Destroyed without the error: the result promise carries it, and a stream nobody listens
    // to for errors must not crash the process.
    for (const s of p.incoming?.values() ?? []) if (!s.readableEnded) s.destroy();
    p.outgoing?.abort();
    p.reject(err);
  }

  private onData(chunk: Buffer): void {
    if (this.closedWith) return;
    let frames: Frame[];
    try {
      frames = this.decoder.push(chunk);
      for (const f of frames) this.onFrame(f);
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      this.close(new ChannelClosedError(`guest broke the agent protocol: ${msg}`));
    }
  }

  private parseJson(f: Frame): any {
    try {
      const v = JSON.parse(f.payload.toString("utf8"));
      if (typeof v !== "object" || v === null) throw new Error("not an object");
      return v;
    } catch {
      throw new ProtocolError(`malformed JSON in a frame of kind ${f.kind} for stream ${f.id}`);
    }
  }

  private onFrame(f: Frame): void {
    if (f.kind === Kind.Hello) {
      const h = this.parseJson(f) as Hello;
      if (this.nonce && h.nonce !== this.nonce) return; // stale: sent before the snapshot
      this.helloResolve(h);
      this.emit("hello", h);
      return;
    }
    const p = this.pending.get(f.id);
    switch (f.kind) {
      case Kind.Response: {
        const body = this.parseJson(f) as { ok?: unknown; error?: Partial<ErrorReply["error"]> };
        if (!p) return; // timed out or cancelled: drop
        this.pending.delete(f.id);
        if (p.timer) clearTimeout(p.timer);
        if (body.ok === true) {
          for (const s of p.incoming?.values() ?? []) s.finish();
          p.resolve(body);
        } else {
          const code = typeof body.error?.code === "string" ? body.error.code : "EIO";
          const message = typeof body.error?.message === "string" ? body.error.message : "guest reported an error";
          this.fail(p, new AgentError(code, message));
        }
        return;
      }
      case Kind.Event:
        p?.onEvent?.(this.parseJson(f));
        return;
      case Kind.Data: {
        const s = p?.incoming?.get(f.channel);
        if (!s) return;
        if (f.payload.length && !s.accept(f.payload)) throw new ProtocolError(`guest overran its credit on stream ${f.id}`);
        if (f.flags & Flag.Eof) s.finish();
        return;
      }
      case Kind.Window: {
        if (f.payload.length !== 4) throw new ProtocolError("window frame must carry 4 bytes");
        if (f.channel === Channel.Stdin) p?.outgoing?.addCredit(f.payload.readUInt32LE(0));
        return;
      }
      default:
        throw new ProtocolError(`guest sent a frame of kind ${f.kind}, which only the host may send`);
    }
  }
}
