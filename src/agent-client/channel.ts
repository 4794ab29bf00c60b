// The host end of one VM's agent channel: multiplexes concurrent requests and streams over a
// single byte stream (the virtio-serial port's unix socket). Anything malformed from the guest
// closes this channel and only this channel.
import { randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";
import type { Duplex, Readable } from "node:stream";
import { Channel, Flag, FrameDecoder, Kind, MAX_PAYLOAD, ProtocolError, encodeFrame, encodeJson, type Frame } from "./frame.js";
import { AgentError, AgentTimeoutError, ChannelClosedError } from "./errors.js";
import { helloProblem, missingFeature } from "./features.js";
import type { ConnectRequest, DirChange, ErrorReply, ExecRequest, Hello, ListenRequest, ReadRequest, ShareRequest, SimpleOps, WatchRequest, WriteRequest } from "./messages.js";
import type { Mux, RequestOptions, StreamParts } from "./mux.js";
import { adopt, exec, execBuffered, type BufferedExecResult, type ExecSession } from "./ops/exec.js";
import { readFile, readFileBuffer, writeFile, type ReadFileStream } from "./ops/files.js";
import { connect, listen, type GuestListener, type Tunnel } from "./ops/tcp.js";
import { watch, type DirWatch } from "./ops/watch.js";
import { share, type Share } from "./ops/share.js";
import { OutgoingStream } from "./streams.js";
import { ignore } from "../util/ignore.js";

export type { BufferedExecResult, DirWatch, ExecSession, GuestListener, ReadFileStream, RequestOptions, Share, Tunnel };

interface Pending extends StreamParts {
  op: string;
  resolve(body: any): void;
  reject(err: Error): void;
  timer?: NodeJS.Timeout;
}

/**
 * The file operations: done with once answered, as against what lasts (an exec, a watch, a
 * listener, a connection), whose wait is the caller's own.
 */
const FILE_OPS = new Set(["read", "write", "mkdir", "move", "remove", "chmod", "stat", "list", "glob", "symlink", "sync"]);

export class AgentChannel extends EventEmitter implements Mux {
  private decoder: FrameDecoder;
  private socket!: Duplex;
  /** Bumped whenever the channel lets go of a socket: events of an old socket are ignored. */
  private socketGen = 0;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closedWith: Error | null = null;
  private helloResolve!: (h: Hello) => void;
  private helloReject!: (e: Error) => void;
  private helloPromise!: Promise<Hello>;
  /** The agent's hello once it came: its version and the features requests are checked against. */
  private agent: Hello | null = null;
  private nonce: string | null;
  /** While held (a save of the VM under way, or the VM paused), the host's frames wait here. */
  private heldWrites: Buffer[] | null = null;
  /** Set while a held channel waits for its guest to take the streams over on a new socket. */
  private continuing = false;

  /**
   * With `resync`, bytes before the guest's next HELLO are skipped (re-attaching to a VM). With
   * `introduce`, the host speaks first: it sends a HELLO with a nonce and waits for the guest's
   * HELLO that echoes it, skipping whatever the guest had in flight before — the way to take
   * over a guest restored from a snapshot, which still believes its old host is there. Its
   * processes are killed, unless `keepProcesses` (a resumed pause, a copy of a snapshot) lets them run on, detached for adoption.
   */
  constructor(socket: Duplex, opts: { resync?: boolean; introduce?: boolean; keepProcesses?: boolean } = {}) {
    super();
    // Every sandbox of a shared (pool-mode) VM watches its channel close.
    this.setMaxListeners(0);
    this.nonce = opts.introduce ? randomBytes(16).toString("hex") : null;
    this.decoder = new FrameDecoder(undefined, opts.resync || opts.introduce || false);
    this.expectHello();
    this.bind(socket);
    if (this.nonce) socket.write(encodeJson(0, Kind.Hello, { nonce: this.nonce, ...(opts.keepProcesses ? { keep: true } : {}) }));
  }

  /** Resolves with the agent's hello (after `continueOn`, the one on the new socket); rejects if the channel closes first. */
  get hello(): Promise<Hello> {
    return this.helloPromise;
  }

  private expectHello(): void {
    this.helloPromise = new Promise<Hello>((res, rej) => {
      this.helloResolve = res;
      this.helloReject = rej;
    });
    this.helloPromise.catch(ignore("the caller awaits it; this only keeps it from going unhandled"));
  }

  private bind(socket: Duplex): void {
    const gen = ++this.socketGen;
    this.socket = socket;
    socket.on("data", (chunk: Buffer) => gen === this.socketGen && this.onData(chunk));
    socket.on("error", (err) => gen === this.socketGen && this.close(new ChannelClosedError(`agent channel failed: ${err.message}`)));
    socket.on("close", () => gen === this.socketGen && this.close(new ChannelClosedError("agent channel closed")));
  }

  private send(frame: Buffer): void {
    if (this.heldWrites) this.heldWrites.push(frame);
    else this.socket.write(frame);
  }

  /**
   * Holds the channel before its VM is saved (feature continue-sessions): resolves once the guest
   * has sent everything it will send until the hold ends, so no frame is half-way anywhere when
   * the VMM goes. The host's own frames wait in memory meanwhile (each stream's credit bounds them).
   */
  async hold(): Promise<void> {
    await this.request<"hold">({ op: "hold" }, { timeoutMs: 10_000 });
    this.heldWrites ??= [];
  }

  /** Whether the agent advertised `feature` in its hello (false before the hello). */
  supports(feature: string): boolean {
    return this.agent?.features.includes(feature) ?? false;
  }

  /** Whether the channel is held, its streams waiting for the VM to run again. */
  get held(): boolean {
    return this.heldWrites !== null;
  }

  /** Ends a hold whose save did not happen: what waited goes out, and the guest sends again. */
  async unhold(): Promise<void> {
    this.flushHeld();
    await this.request<"hold">({ op: "hold", on: false }, { timeoutMs: 10_000 });
  }

  private flushHeld(): void {
    const waiting = this.heldWrites ?? [];
    this.heldWrites = null;
    for (const f of waiting) this.socket.write(f);
  }

  /** Lets go of the socket of a held channel's VM, which is going away; every stream stays for `continueOn`. */
  letGoOfSocket(): void {
    if (!this.heldWrites) throw new Error("only a held channel can let go of its socket");
    this.socketGen++;
    this.socket.destroy();
  }

  /**
   * Carries a held channel over to the socket of the VM restored from its save: the guest is
   * told this host still has every stream, and once it agrees (`hello` resolves) the frames that
   * waited go out. A guest that cannot continue closes the channel, failing those streams.
   */
  continueOn(socket: Duplex): void {
    if (!this.heldWrites) throw new Error("only a held channel can continue on a new socket");
    this.nonce = randomBytes(16).toString("hex");
    this.decoder = new FrameDecoder(undefined, true);
    this.continuing = true;
    this.expectHello();
    this.bind(socket);
    socket.write(encodeJson(0, Kind.Hello, { nonce: this.nonce, keep: true, continue: true }));
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

  /** Starts a process; stdout and stderr arrive as they are produced (ops/exec.ts). */
  exec(req: Omit<ExecRequest, "op">): ExecSession {
    return exec(this, req);
  }

  /** Takes over a detached process `procs` listed (feature adopt); `stdin` when it still has one open. */
  adopt(target: number, stdin: boolean): ExecSession {
    return adopt(this, target, stdin);
  }

  /** Runs a process to completion, collecting at most maxOutputBytes of each stream. */
  execBuffered(req: Omit<ExecRequest, "op" | "stdin">, opts: { stdin?: Uint8Array | string; maxOutputBytes?: number } = {}): Promise<BufferedExecResult> {
    return execBuffered(this, req, opts);
  }

  /** Writes a file atomically in the guest from bytes or a stream of chunks (ops/files.ts). */
  writeFile(path: string, data: Uint8Array | string | AsyncIterable<Uint8Array> | Readable, opts: Omit<WriteRequest, "op" | "path"> = {}): Promise<{ size: number }> {
    return writeFile(this, path, data, opts);
  }

  /** Streams a file out of the guest; the stream applies backpressure to the guest. */
  readFile(path: string, opts: Omit<ReadRequest, "op" | "path"> = {}): ReadFileStream {
    return readFile(this, path, opts);
  }

  /** Reads a whole file into memory, refusing files larger than maxBytes. */
  readFileBuffer(path: string, maxBytes?: number, opts: Omit<ReadRequest, "op" | "path"> = {}): Promise<Buffer> {
    return readFileBuffer(this, path, maxBytes, opts);
  }

  /** Opens a TCP tunnel to a guest port, or onto a connection a guest listener accepted (ops/tcp.ts). */
  connect(req: Omit<ConnectRequest, "op">): Tunnel {
    return connect(this, req);
  }

  /** Mounts a FUSE filesystem at `path` in the guest whose requests come here. */
  share(req: Omit<ShareRequest, "op">): Share {
    return share(this, req);
  }

  /** Watches a guest directory; onChange gets each change, named relative to it. */
  watch(req: Omit<WatchRequest, "op">, onChange: (c: DirChange) => void): DirWatch {
    return watch(this, req, onChange);
  }

  /** Listens on a guest TCP port; onAccept gets each connection to claim with connect({conn}). */
  listen(req: Omit<ListenRequest, "op">, onAccept: (conn: number) => void): GuestListener {
    return listen(this, req, onAccept);
  }

  closeStream(id: number, transfer = false): void {
    if (!this.isOpen || !this.pending.has(id)) return;
    this.request<"close">({ op: "close", target: id, ...(transfer ? { transfer: true as const } : {}) }).catch(ignore("the stream may be closed on the guest's side already"));
  }

  /**
   * Fails the file operations in flight with `reason` and closes them on the guest's side (sent
   * now, read when the guest goes on), for a guest its VMM holds paused: their callers get an
   * answer at once, and a write told it failed is abandoned rather than made later. Returns how
   * many. Execs and other lasting requests wait with their guest.
   */
  failFileOps(reason: Error): number {
    let n = 0;
    for (const [id, p] of [...this.pending]) {
      if (!FILE_OPS.has(p.op)) continue;
      if (this.isOpen) this.request<"close">({ op: "close", target: id }).catch(ignore("the guest may have finished it before it paused"));
      this.pending.delete(id);
      if (p.timer) clearTimeout(p.timer);
      this.fail(p, reason);
      n++;
    }
    return n;
  }

  /** Closes the channel; every request in flight fails with the reason. */
  close(reason: Error = new ChannelClosedError("agent channel closed")): void {
    if (this.closedWith) return;
    this.closedWith = reason;
    this.heldWrites = null;
    this.socket.destroy();
    this.helloReject(reason);
    for (const [, p] of this.pending) this.fail(p, reason);
    this.pending.clear();
    this.emit("close", reason);
  }

  start<B extends { op: string }>(body: B, p: StreamParts, opts: RequestOptions = {}): { id: number; result: Promise<any> } {
    const id = this.allocId();
    const result = new Promise<any>((resolve, reject) => {
      if (this.closedWith) return reject(this.closedWith);
      const missing = this.agent && missingFeature(this.agent, body);
      if (missing)
        return reject(
          new AgentError(
            "ENOTSUP",
            `the agent in this VM (${this.agent!.agent}) lacks "${missing}", which ${body.op} needs: rebuild the initramfs (./setup.sh) and start a new sandbox`,
          ),
        );
      const payload = Buffer.from(JSON.stringify(body), "utf8");
      if (payload.length > MAX_PAYLOAD) {
        const hint =
          body.op === "exec" ? " (command, arguments and environment): write long input to a file in the sandbox, or send it as stdin, and run a command that reads it" : "";
        return reject(new AgentError("E2BIG", `the ${body.op} request is ${payload.length} bytes, more than the ${MAX_PAYLOAD} one message to the guest may carry${hint}`));
      }
      const entry: Pending = { ...p, op: body.op, resolve, reject };
      if (opts.timeoutMs) {
        entry.timer = setTimeout(() => {
          this.pending.delete(id);
          this.fail(entry, new AgentTimeoutError(`guest did not answer "${(body as any).op}" within ${opts.timeoutMs} ms`));
        }, opts.timeoutMs);
      }
      this.pending.set(id, entry);
      this.send(encodeFrame(id, Kind.Request, 0, 0, payload));
    });
    return { id, result };
  }

  outgoing(id: () => number): OutgoingStream {
    return new OutgoingStream(
      (chunk, eof) => {
        if (this.isOpen) this.send(encodeFrame(id(), Kind.Data, Channel.Stdin, eof ? Flag.Eof : 0, chunk ?? undefined));
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

  grant(id: number, channel: number, n: number): void {
    if (!this.isOpen || !this.pending.has(id) || n <= 0) return;
    const p = Buffer.allocUnsafe(4);
    p.writeUInt32LE(n, 0);
    this.send(encodeFrame(id, Kind.Window, channel, 0, p));
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
      if (!Array.isArray(h.features)) throw new ProtocolError("HELLO without a features list");
      const problem = helloProblem(h);
      if (problem) {
        this.close(new ChannelClosedError(problem));
        return;
      }
      if (this.continuing) {
        this.continuing = false;
        if (h.continued !== true) {
          this.close(new ChannelClosedError("the restored guest could not carry its streams over (its agent predates continue-sessions, or the channel was not held)"));
          return;
        }
        this.flushHeld();
      }
      this.agent = h;
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
