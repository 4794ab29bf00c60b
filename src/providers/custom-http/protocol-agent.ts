// The guest side of our agent protocol (docs/protocol.md), played on this host for a sandbox of a
// Custom HTTP backend: core's AgentChannel talks to it as to any agent, and each operation is
// carried out with the backend's HTTP calls. It advertises only what the protocol can do —
// exec (its output whole at the end, as the protocol answers it), files, glob — so core refuses
// everything else (ports, watches, metrics, snapshots) by feature before it is asked. Within
// those operations, what the protocol cannot say is refused with ENOTSUP naming it: a process's
// stdin, a terminal, another user than the backend's, a binary file written.
import { posix } from "node:path";
import type { Readable, Writable } from "node:stream";
import { Channel, DATA_CHUNK, encodeFrame, encodeJson, Flag, FrameDecoder, type Frame, INITIAL_WINDOW, Kind, PROTOCOL_VERSION } from "../../agent-client/index.js";
import { ignore } from "../../util/ignore.js";
import { type CustomApi, type CustomFileInfo, CustomHttpError } from "./custom-api.js";

/** What this agent can do: the operations the protocol has a route for. */
export const CUSTOM_FEATURES = ["exec", "files", "glob", "configure"];
/** Largest file a write carries: the protocol sends it as one JSON string. */
const MAX_UPLOAD = 64 * 1024 * 1024;

type Req = Record<string, unknown> & { op?: string };

/** An operation's failure, as the agent reports one: an errno-like code and a message. */
class OpError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

const notSupported = (what: string) => new OpError("ENOTSUP", `the Custom HTTP provider protocol cannot ${what}`);

/** A backend's failure as an errno: its status says which. */
function opError(e: unknown): OpError {
  if (e instanceof OpError) return e;
  if (e instanceof CustomHttpError) {
    const code = e.status === 404 ? "ENOENT" : e.status === 409 ? "EEXIST" : e.status === 403 ? "EACCES" : e.status === 400 || e.status === 413 ? "EINVAL" : "EIO";
    return new OpError(code, e.message);
  }
  return new OpError("EIO", (e as Error).message);
}

/** Permission bits of the protocol's mode: octal ("0755") or ls's notation ("-rwxr-xr-x"). */
export function modeBits(mode: string, isDir: boolean): number {
  if (/^0?[0-7]{3,4}$/.test(mode)) return Number.parseInt(mode, 8);
  const m = /^.?([r-][w-][xsS-][r-][w-][xsS-][r-][w-][xtT-])$/.exec(mode);
  if (m) return [...m[1]].reduce((bits, c, i) => (c === "-" || c === "S" || c === "T" ? bits : bits | (1 << (8 - i))), 0);
  return isDir ? 0o755 : 0o644;
}

/** Our stat of a protocol file info. */
function statOf(f: CustomFileInfo) {
  const type = f.isDir ? "dir" : /^L/.test(f.mode) ? "symlink" : "file";
  const mtime = Date.parse(f.modTime);
  return { type, size: f.size, mode: modeBits(f.mode, f.isDir), uid: 0, gid: 0, mtime_ms: Number.isFinite(mtime) ? mtime : 0 };
}

const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

export class ProtocolAgent {
  private readonly decoder = new FrameDecoder();
  /** Credit the host granted per stream and channel for what this side sends. */
  private readonly credit = new Map<string, number>();
  private readonly creditWaits = new Map<string, () => void>();
  private readonly uploads = new Map<number, { chunks: Buffer[]; size: number; over: boolean; done: () => void }>();
  private pids = 1;

  constructor(
    private readonly api: CustomApi,
    private readonly sandboxId: string,
    private readonly name: string,
    private readonly out: Writable,
    input: Readable,
    /** Bounds each exec when the request gives no timeout of its own. */
    private readonly timeoutMs: number,
  ) {
    input.on("data", (c: Buffer) => this.onBytes(c));
    this.out.write(encodeJson(0, Kind.Hello, { ok: true, proto: PROTOCOL_VERSION, agent: `custom-http (${name})`, pid: 0, features: CUSTOM_FEATURES }));
  }

  private onBytes(chunk: Buffer): void {
    let frames: Frame[];
    try {
      frames = this.decoder.push(chunk);
    } catch {
      this.out.destroy();
      return;
    }
    for (const f of frames) this.onFrame(f);
  }

  private onFrame(f: Frame): void {
    if (f.kind === Kind.Request) {
      let req: Req;
      try {
        req = JSON.parse(f.payload.toString("utf8")) as Req;
      } catch {
        this.fail(f.id, new OpError("EINVAL", "the request is not JSON"));
        return;
      }
      void this.handle(f.id, req).then(
        (body) => this.reply(f.id, body),
        (e) => this.fail(f.id, opError(e)),
      );
    } else if (f.kind === Kind.Data && f.channel === Channel.Stdin) {
      const u = this.uploads.get(f.id);
      if (!u) return;
      if (!u.over) {
        u.size += f.payload.length;
        if (u.size > MAX_UPLOAD) u.over = true;
        else u.chunks.push(Buffer.from(f.payload));
      }
      // The bytes are taken: the host may send as many again.
      if (f.payload.length) this.out.write(encodeFrame(f.id, Kind.Window, Channel.Stdin, 0, this.u32(f.payload.length)));
      if (f.flags & Flag.Eof) u.done();
    } else if (f.kind === Kind.Window && f.payload.length >= 4) {
      const key = `${f.id}:${f.channel}`;
      this.credit.set(key, (this.credit.get(key) ?? INITIAL_WINDOW) + f.payload.readUInt32LE(0));
      this.creditWaits.get(key)?.();
    }
  }

  private u32(n: number): Buffer {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n, 0);
    return b;
  }

  private reply(id: number, body: Record<string, unknown>): void {
    this.credit.delete(`${id}:${Channel.Stdout}`);
    this.credit.delete(`${id}:${Channel.Stderr}`);
    if (!this.out.destroyed) this.out.write(encodeJson(id, Kind.Response, { ok: true, ...body }));
  }

  private fail(id: number, e: OpError): void {
    this.uploads.delete(id);
    if (!this.out.destroyed) this.out.write(encodeJson(id, Kind.Response, { ok: false, error: { code: e.code, message: e.message } }));
  }

  /** Sends one channel's bytes within the host's credit, then its EOF. */
  private async sendChannel(id: number, channel: number, data: Buffer): Promise<void> {
    await this.sendBytes(id, channel, data);
    this.out.write(encodeFrame(id, Kind.Data, channel, Flag.Eof));
  }

  /** Sends bytes on a channel within the host's credit, waiting for more credit as it runs out. */
  private async sendBytes(id: number, channel: number, data: Buffer): Promise<void> {
    const key = `${id}:${channel}`;
    for (let at = 0; at < data.length; ) {
      let have = this.credit.get(key) ?? INITIAL_WINDOW;
      while (have <= 0) {
        await new Promise<void>((r) => this.creditWaits.set(key, r));
        have = this.credit.get(key) ?? 0;
      }
      const n = Math.min(DATA_CHUNK, have, data.length - at);
      this.credit.set(key, have - n);
      this.out.write(encodeFrame(id, Kind.Data, channel, 0, data.subarray(at, at + n)));
      at += n;
    }
    this.creditWaits.delete(key);
  }

  /** Refuses a request made as another user than the backend's own. */
  private asBackend(req: Req): void {
    if ((typeof req.as_uid === "number" && req.as_uid !== 0) || (typeof req.uid === "number" && req.uid !== 0)) throw notSupported("act as another user than the backend's");
    if (typeof req.user === "string" && req.user !== "root" && req.user !== "0") throw notSupported(`run a command as user ${req.user}: every command runs as the backend's user`);
  }

  private async shell(command: string): Promise<void> {
    const r = await this.api.exec(this.sandboxId, "/bin/sh", ["-c", command], undefined, undefined, this.timeoutMs);
    if (r.exitCode !== 0) throw new OpError("EIO", `${command}: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
  }

  private async handle(id: number, req: Req): Promise<Record<string, unknown>> {
    const path = typeof req.path === "string" ? req.path : "";
    switch (req.op) {
      case "hello":
        return { proto: PROTOCOL_VERSION, agent: `custom-http (${this.name})`, pid: 0, features: CUSTOM_FEATURES };
      case "ping":
      case "configure":
        // Nothing of a fresh VM's setup (clock, entropy, hostname) is the protocol's to give.
        return {};
      case "exec":
        return this.exec(id, req);
      case "read": {
        this.asBackend(req);
        const st = await this.api.stat(this.sandboxId, path);
        if (st.isDir) throw new OpError("EISDIR", `${path} is a directory`);
        this.out.write(encodeJson(id, Kind.Event, { event: "stat", ...statOf(st) }));
        // The part asked for (offset, length) of the backend's bytes, passed on as they come.
        const from = typeof req.offset === "number" ? req.offset : 0;
        const to = typeof req.length === "number" ? from + req.length : Number.POSITIVE_INFINITY;
        let at = 0;
        let sent = 0;
        for await (const chunk of await this.api.readFile(this.sandboxId, path)) {
          const part = Buffer.from(chunk).subarray(Math.max(0, from - at), Math.max(0, to - at));
          at += chunk.length;
          if (part.length) await this.sendBytes(id, Channel.Stdout, part);
          sent += part.length;
          if (at >= to) break;
        }
        this.out.write(encodeFrame(id, Kind.Data, Channel.Stdout, Flag.Eof));
        return { size: sent };
      }
      case "write":
        return this.write(id, req, path);
      case "stat":
        this.asBackend(req);
        return statOf(await this.api.stat(this.sandboxId, path));
      case "list":
        this.asBackend(req);
        if (typeof req.offset === "number" && req.offset > 0) return { entries: [], truncated: false };
        return {
          entries: (await this.api.list(this.sandboxId, path)).map((e) => ({ name: posix.basename(e.path), ...statOf(e) })),
          truncated: false,
        };
      case "mkdir": {
        this.asBackend(req);
        await this.shell(`mkdir ${req.parents === false ? "" : "-p "}-- ${quote(path)}`);
        if (typeof req.mode === "number") await this.api.chmod(this.sandboxId, path, req.mode);
        return {};
      }
      case "remove":
        this.asBackend(req);
        await this.api.remove(this.sandboxId, path, !!req.recursive);
        return {};
      case "move": {
        this.asBackend(req);
        const from = String(req.from ?? "");
        const to = String(req.to ?? "");
        if (
          req.overwrite === false &&
          (await this.api.stat(this.sandboxId, to).then(
            () => true,
            () => false,
          ))
        )
          throw new OpError("EEXIST", `${to} exists`);
        await this.api.move(this.sandboxId, from, to);
        return {};
      }
      case "chmod":
        this.asBackend(req);
        await this.api.chmod(this.sandboxId, path, Number(req.mode));
        return {};
      case "glob":
        this.asBackend(req);
        return { matches: await this.api.glob(this.sandboxId, String(req.pattern ?? "")), truncated: false };
      case "signal":
        throw notSupported("signal a process: it has no route for one");
      case "shutdown":
        return {};
      default:
        throw new OpError("ENOSYS", `the Custom HTTP provider protocol has no ${String(req.op)}`);
    }
  }

  private async exec(id: number, req: Req): Promise<Record<string, unknown>> {
    if (req.pty) throw notSupported("give a process a terminal");
    if (req.stdin) throw notSupported("feed a process's stdin: it sends the command and reads its output once it ends");
    if (typeof req.umask === "number" && req.umask !== 0o022) throw notSupported("set a process's umask");
    this.asBackend(req);
    const argv = Array.isArray(req.argv) ? req.argv.map(String) : null;
    const [command, args] = argv?.length ? [argv[0], argv.slice(1)] : [String(req.cmd ?? ""), undefined];
    if (!command) throw new OpError("EINVAL", "exec needs argv or cmd");
    this.out.write(encodeJson(id, Kind.Event, { event: "started", pid: this.pids++ }));
    const limit = typeof req.timeout_ms === "number" && req.timeout_ms > 0 ? req.timeout_ms : null;
    const call = this.api.exec(
      this.sandboxId,
      command,
      args,
      req.env as Record<string, string> | undefined,
      typeof req.cwd === "string" ? req.cwd : undefined,
      limit ?? this.timeoutMs,
    );
    let timer: NodeJS.Timeout | undefined;
    // The protocol cannot kill a process: at the timeout, the caller gets 124 and the backend's process may go on.
    const timedOut = limit ? new Promise<null>((r) => (timer = setTimeout(() => r(null), limit))) : new Promise<null>(() => {});
    const r = await Promise.race([call, timedOut]);
    clearTimeout(timer);
    if (!r) {
      call.catch(ignore("the caller was answered at the timeout; the backend's late answer has no one to go to"));
      await this.sendChannel(id, Channel.Stdout, Buffer.alloc(0));
      await this.sendChannel(id, Channel.Stderr, Buffer.alloc(0));
      return { exit_code: 124, timed_out: true };
    }
    await this.sendChannel(id, Channel.Stdout, Buffer.from(r.stdout));
    await this.sendChannel(id, Channel.Stderr, Buffer.from(r.stderr));
    return { exit_code: r.exitCode, timed_out: false };
  }

  private async write(id: number, req: Req, path: string): Promise<Record<string, unknown>> {
    const body = await new Promise<Buffer | null>((resolve) => {
      const u = { chunks: [] as Buffer[], size: 0, over: false, done: () => resolve(u.over ? null : Buffer.concat(u.chunks)) };
      this.uploads.set(id, u);
    });
    this.uploads.delete(id);
    if (!body) throw new OpError("EFBIG", `the Custom HTTP provider protocol carries a file as one JSON string: at most ${MAX_UPLOAD} bytes`);
    this.asBackend(req);
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(body);
    } catch {
      throw notSupported("write a binary file: it carries a file's content as text");
    }
    const mode = typeof req.mode === "number" ? req.mode : undefined;
    try {
      await this.api.writeFile(this.sandboxId, path, text, mode);
    } catch (e) {
      // The protocol does not say whether a write makes its parents: where it did not, they are made with a command, and the write tried again.
      if (req.parents === false || !(e instanceof CustomHttpError) || e.status !== 404) throw e;
      await this.shell(`mkdir -p -- ${quote(posix.dirname(path))}`);
      await this.api.writeFile(this.sandboxId, path, text, mode);
    }
    return { size: body.length };
  }
}
