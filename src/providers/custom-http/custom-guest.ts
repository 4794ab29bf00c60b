// The guest of a Custom HTTP backend's sandbox (providers/guest.ts), carried out with the
// backend's own calls (custom-api.ts): exec (its output whole at the end, as the protocol answers
// it), files and glob. It says so in its features, so core refuses everything else (ports,
// watches, metrics, host directories, snapshots) by name before asking; within those operations
// what the protocol cannot say is refused with ENOTSUP naming it: a process's stdin, a terminal,
// a signal, another user than the backend's, a binary file written.
import { EventEmitter } from "node:events";
import { posix } from "node:path";
import { PassThrough, Readable } from "node:stream";
import {
  AgentError,
  type BufferedExecResult,
  ChannelClosedError,
  type DirWatch,
  type ExecRequest,
  type ExecResult,
  type ExecSession,
  type FileStat,
  type GuestListener,
  type Hello,
  PROTOCOL_VERSION,
  type ReadFileStream,
  type ReadRequest,
  type Share,
  type SimpleOps,
  type Tunnel,
  type WriteRequest,
} from "../../agent-client/index.js";
import { ignore } from "../../util/ignore.js";
import type { Guest } from "../guest.js";
import { type CustomApi, type CustomFileInfo, CustomHttpError } from "./custom-api.js";

/** What this guest can do: the operations the protocol has a route for. */
export const CUSTOM_FEATURES = ["exec", "files", "glob", "configure"];
/** Largest file a write carries: the protocol sends it as one JSON string. */
const MAX_UPLOAD = 64 * 1024 * 1024;

const notSupported = (what: string) => new AgentError("ENOTSUP", `the Custom HTTP provider protocol cannot ${what}`);

/** A backend's failure as an errno, as an agent would report it: its status says which. */
function opError(e: unknown): Error {
  if (e instanceof AgentError || e instanceof ChannelClosedError) return e;
  if (e instanceof CustomHttpError) {
    const code = e.status === 404 ? "ENOENT" : e.status === 409 ? "EEXIST" : e.status === 403 ? "EACCES" : e.status === 400 || e.status === 413 ? "EINVAL" : "EIO";
    return new AgentError(code, e.message);
  }
  return new AgentError("EIO", (e as Error).message);
}

/** Permission bits of the protocol's mode: octal ("0755") or ls's notation ("-rwxr-xr-x"). */
export function modeBits(mode: string, isDir: boolean): number {
  if (/^0?[0-7]{3,4}$/.test(mode)) return Number.parseInt(mode, 8);
  const m = /^.?([r-][w-][xsS-][r-][w-][xsS-][r-][w-][xtT-])$/.exec(mode);
  if (m) return [...m[1]].reduce((bits, c, i) => (c === "-" || c === "S" || c === "T" ? bits : bits | (1 << (8 - i))), 0);
  return isDir ? 0o755 : 0o644;
}

/** Our stat of a protocol file info. */
function statOf(f: CustomFileInfo): FileStat {
  const type = f.isDir ? "dir" : /^L/.test(f.mode) ? "symlink" : "file";
  const mtime = Date.parse(f.modTime);
  return { type, size: f.size, mode: modeBits(f.mode, f.isDir), uid: 0, gid: 0, mtime_ms: Number.isFinite(mtime) ? mtime : 0 };
}

const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

type Req = Record<string, unknown> & { op: string };

export class CustomGuest extends EventEmitter implements Guest {
  readonly hello: Promise<Hello>;
  private closedWith: Error | null = null;
  private pids = 1;

  constructor(
    private readonly api: CustomApi,
    private readonly sandboxId: string,
    name: string,
    /** Bounds each exec when the request gives no timeout of its own. */
    private readonly timeoutMs: number,
  ) {
    super();
    this.hello = Promise.resolve({ ok: true, proto: PROTOCOL_VERSION, agent: `custom-http (${name})`, pid: 0, features: CUSTOM_FEATURES });
  }

  get isOpen(): boolean {
    return this.closedWith === null;
  }

  get closeReason(): Error | null {
    return this.closedWith;
  }

  supports(feature: string): boolean {
    return CUSTOM_FEATURES.includes(feature);
  }

  /** Runs `work` unless the guest closed; its failure as an agent's would read. */
  private async call<T>(work: () => Promise<T>): Promise<T> {
    if (this.closedWith) throw this.closedWith;
    return work().catch((e) => {
      throw opError(e);
    });
  }

  request<K extends keyof SimpleOps>(req: SimpleOps[K]["req"]): Promise<SimpleOps[K]["res"]> {
    return this.call(() => this.simple(req as unknown as Req)) as Promise<SimpleOps[K]["res"]>;
  }

  private async simple(req: Req): Promise<Record<string, unknown>> {
    const path = typeof req.path === "string" ? req.path : "";
    switch (req.op) {
      case "hello":
        return { ...(await this.hello) };
      case "ping":
      case "configure":
        // Nothing of a fresh VM's setup (clock, entropy, hostname) is the protocol's to give.
        return { ok: true };
      case "shutdown":
        // A guest that shuts down is a sandbox that ends: the backend's goes, and this guest closes with it.
        await this.api.destroy(this.sandboxId);
        this.close(new ChannelClosedError("the sandbox shut down"));
        return { ok: true };
      case "stat":
        this.asBackend(req);
        return { ok: true, ...statOf(await this.api.stat(this.sandboxId, path)) };
      case "list":
        this.asBackend(req);
        if (typeof req.offset === "number" && req.offset > 0) return { ok: true, entries: [], truncated: false };
        return {
          ok: true,
          entries: (await this.api.list(this.sandboxId, path)).map((e) => ({ name: posix.basename(e.path), ...statOf(e) })),
          truncated: false,
        };
      case "mkdir":
        this.asBackend(req);
        await this.shell(`mkdir ${req.parents === false ? "" : "-p "}-- ${quote(path)}`);
        if (typeof req.mode === "number") await this.api.chmod(this.sandboxId, path, req.mode);
        return { ok: true };
      case "remove":
        this.asBackend(req);
        await this.api.remove(this.sandboxId, path, !!req.recursive);
        return { ok: true };
      case "move": {
        this.asBackend(req);
        const to = String(req.to ?? "");
        // Only a move that must not overwrite costs a look first: the protocol's move has no such flag.
        if (
          req.overwrite === false &&
          (await this.api.stat(this.sandboxId, to).then(
            () => true,
            () => false,
          ))
        )
          throw new AgentError("EEXIST", `${to} exists`);
        await this.api.move(this.sandboxId, String(req.from ?? ""), to);
        return { ok: true };
      }
      case "chmod":
        this.asBackend(req);
        await this.api.chmod(this.sandboxId, path, Number(req.mode));
        return { ok: true };
      case "glob":
        this.asBackend(req);
        return { ok: true, matches: await this.api.glob(this.sandboxId, String(req.pattern ?? "")), truncated: false };
      case "signal":
        throw notSupported("signal a process: it has no route for one");
      default:
        throw notSupported(`do "${req.op}": it has no route for it`);
    }
  }

  /** Refuses an operation asked as another user than the backend's own. */
  private asBackend(req: Record<string, unknown>): void {
    if ((typeof req.as_uid === "number" && req.as_uid !== 0) || (typeof req.uid === "number" && req.uid !== 0)) throw notSupported("act as another user than the backend's");
    if (typeof req.user === "string" && req.user !== "root" && req.user !== "0") throw notSupported(`run a command as user ${req.user}: every command runs as the backend's user`);
  }

  private async shell(command: string): Promise<void> {
    const r = await this.api.exec(this.sandboxId, "/bin/sh", ["-c", command], undefined, undefined, this.timeoutMs);
    if (r.exitCode !== 0) throw new AgentError("EIO", `${command}: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
  }

  /** A process run to its end by the backend; its output comes whole, then its exit. */
  private async run(req: Omit<ExecRequest, "op">): Promise<{ stdout: Buffer; stderr: Buffer; result: ExecResult }> {
    if (req.pty) throw notSupported("give a process a terminal");
    if (req.stdin) throw notSupported("feed a process's stdin: it sends the command and reads its output once it ends");
    if (typeof req.umask === "number" && req.umask !== 0o022) throw notSupported("set a process's umask");
    this.asBackend(req as Record<string, unknown>);
    const [command, args] = req.argv?.length ? [req.argv[0], req.argv.slice(1)] : [req.cmd ?? "", undefined];
    if (!command) throw new AgentError("EINVAL", "exec needs argv or cmd");
    const limit = req.timeout_ms && req.timeout_ms > 0 ? req.timeout_ms : null;
    const call = this.api.exec(this.sandboxId, command, args, req.env, req.cwd, limit ?? this.timeoutMs);
    let timer: NodeJS.Timeout | undefined;
    // The protocol cannot kill a process: at the timeout, the caller gets 124 and the backend's process may go on.
    const timedOut = limit ? new Promise<null>((r) => (timer = setTimeout(() => r(null), limit))) : new Promise<null>(() => {});
    const r = await Promise.race([call, timedOut]);
    clearTimeout(timer);
    if (!r) {
      call.catch(ignore("the caller was answered at the timeout; the backend's late answer has no one to go to"));
      return { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0), result: { ok: true, exit_code: 124, timed_out: true } };
    }
    return { stdout: Buffer.from(r.stdout), stderr: Buffer.from(r.stderr), result: { ok: true, exit_code: r.exitCode, timed_out: false } };
  }

  exec(req: Omit<ExecRequest, "op">): ExecSession {
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    const pid = this.pids++;
    const ran = this.call(() => this.run(req));
    const result = ran.then((r) => {
      stdout.end(r.stdout);
      stderr.end(r.stderr);
      return r.result;
    });
    result.catch((e: Error) => {
      stdout.destroy(e);
      stderr.destroy(e);
    });
    // It has started once the backend took it (the protocol says no sooner); one refused never did.
    const started = ran.then(() => ({ event: "started" as const, pid }));
    started.catch(ignore("its failure reaches the caller through the result"));
    return {
      id: pid,
      stdout,
      stderr,
      stdin: null,
      started,
      result,
      signal: () => Promise.reject(notSupported("signal a process: it has no route for one")),
      resize: () => Promise.reject(notSupported("give a process a terminal")),
    };
  }

  adopt(): ExecSession {
    throw notSupported("keep a process of a server that went away: its sandboxes end with their server");
  }

  async execBuffered(req: Omit<ExecRequest, "op" | "stdin">, opts: { stdin?: Uint8Array | string; maxOutputBytes?: number } = {}): Promise<BufferedExecResult> {
    if (opts.stdin !== undefined) throw notSupported("feed a process's stdin: it sends the command and reads its output once it ends");
    const r = await this.call(() => this.run(req));
    const max = opts.maxOutputBytes ?? 64 * 1024 * 1024;
    return {
      ...r.result,
      stdout: r.stdout.subarray(0, max),
      stderr: r.stderr.subarray(0, max),
      truncated: r.stdout.length > max || r.stderr.length > max,
    };
  }

  writeFile(path: string, data: Uint8Array | string | AsyncIterable<Uint8Array> | Readable, opts: Omit<WriteRequest, "op" | "path"> = {}): Promise<{ size: number }> {
    return this.call(async () => {
      // Refused before a byte is read: nothing is taken in for a write that cannot be made.
      this.asBackend(opts as Record<string, unknown>);
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const c of typeof data === "string" || data instanceof Uint8Array ? [Buffer.from(data)] : (data as AsyncIterable<Uint8Array>)) {
        size += c.length;
        if (size > MAX_UPLOAD) throw new AgentError("EFBIG", `the Custom HTTP provider protocol carries a file as one JSON string: at most ${MAX_UPLOAD} bytes`);
        chunks.push(Buffer.from(c));
      }
      let text: string;
      try {
        text = new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(chunks));
      } catch {
        throw notSupported("write a binary file: it carries a file's content as text");
      }
      try {
        await this.api.writeFile(this.sandboxId, path, text, opts.mode);
      } catch (e) {
        // The protocol does not say whether a write makes its parents: where it did not, they are made with a command, and the write tried again.
        if (opts.parents === false || !(e instanceof CustomHttpError) || e.status !== 404) throw e;
        await this.shell(`mkdir -p -- ${quote(posix.dirname(path))}`);
        await this.api.writeFile(this.sandboxId, path, text, opts.mode);
      }
      return { size };
    });
  }

  readFile(path: string, opts: Omit<ReadRequest, "op" | "path"> = {}): ReadFileStream {
    const stat = this.call(async () => {
      this.asBackend(opts as Record<string, unknown>);
      const st = await this.api.stat(this.sandboxId, path);
      if (st.isDir) throw new AgentError("EISDIR", `${path} is a directory`);
      return statOf(st);
    });
    let sent = 0;
    // The part asked for (offset, length) of the backend's bytes, passed on as they come.
    const api = this.api;
    const id = this.sandboxId;
    const from = opts.offset ?? 0;
    const to = opts.length !== undefined ? from + opts.length : Number.POSITIVE_INFINITY;
    const stream = Readable.from(
      (async function* () {
        await stat;
        let at = 0;
        for await (const chunk of await api.readFile(id, path).catch((e) => Promise.reject(opError(e)))) {
          const part = Buffer.from(chunk).subarray(Math.max(0, from - at), Math.max(0, to - at));
          at += chunk.length;
          sent += part.length;
          if (part.length) yield part;
          if (at >= to) break;
        }
      })(),
    );
    const done = new Promise<{ size: number }>((resolve, reject) => {
      stream.once("end", () => resolve({ size: sent }));
      stream.once("error", reject);
    });
    stat.catch(ignore("its failure reaches the caller through the stream"));
    done.catch(ignore("its failure reaches the caller through the stream"));
    return { stream, stat, done };
  }

  async readFileBuffer(path: string, maxBytes = 256 * 1024 * 1024, opts: Omit<ReadRequest, "op" | "path"> = {}): Promise<Buffer> {
    const r = this.readFile(path, opts);
    const st = await r.stat;
    if (st.size > maxBytes) {
      r.stream.destroy();
      throw new AgentError("EFBIG", `${path} is ${st.size} bytes, more than the ${maxBytes} byte limit`);
    }
    const parts: Buffer[] = [];
    for await (const c of r.stream as AsyncIterable<Buffer>) parts.push(c);
    return Buffer.concat(parts);
  }

  connect(): Tunnel {
    throw notSupported("carry a TCP connection: the backend's network is its own");
  }

  share(): Share {
    throw notSupported("mount a host directory");
  }

  watch(): DirWatch {
    throw notSupported("watch a directory");
  }

  listen(): GuestListener {
    throw notSupported("listen on a port in the sandbox");
  }

  async hold(): Promise<void> {
    throw notSupported("hold a sandbox's streams: it has no pause");
  }

  async unhold(): Promise<void> {}

  // No VMM here holds the backend's sandbox paused on a full disk: nothing waits to be failed.
  failFileOps(): number {
    return 0;
  }

  close(reason: Error = new ChannelClosedError("the Custom HTTP backend's sandbox is gone")): void {
    if (this.closedWith) return;
    this.closedWith = reason;
    this.emit("close", reason);
  }
}
