// Processes outlive the server that started them. When a server stops (or crashes, or is
// upgraded), the agent keeps every process it was running for it, detached, with its newest
// output and its exit; the next server that takes the guest over (re-attaching to a running VM,
// resuming a pause another server made, restoring a snapshot or a fork) lists them and adopts
// them into the sandbox's process table, so `commands.list()`, a reconnect by pid and the main
// process's log go on where they were. What a tracked process was started with (its command,
// tag, env, user, terminal) travels as the exec's `note`, kept by the agent in the guest's own
// memory: a snapshot or a pause carries it with the process, and no host store has to.
import type { DetachedProcess } from "../../agent-client/index.js";
import type { Guest } from "../../providers/guest.js";
import type { ProcessSpec, ProcessTable, TrackedProcess } from "./processes.js";

/** The most a note may be (the agent refuses longer ones). */
const MAX_NOTE = 8192;

/** The note an exec of a tracked process carries: its spec, less its env when that would not fit. */
export function noteOf(spec: ProcessSpec): string {
  const { timeoutMs: _t, ...kept } = spec;
  const full = JSON.stringify({ v: 1, ...kept });
  if (Buffer.byteLength(full) <= MAX_NOTE) return full;
  const lean = JSON.stringify({ v: 1, ...kept, env: {} });
  return Buffer.byteLength(lean) <= MAX_NOTE
    ? lean
    : JSON.stringify({ v: 1, cmd: spec.cmd.slice(0, 1024), args: [], env: {}, stdin: spec.stdin, ...(spec.tag ? { tag: spec.tag.slice(0, 256) } : {}) });
}

/**
 * The spec a note describes, checked field by field (the note comes back from the guest, which
 * may have forged it); null when there is none or it is not ours.
 */
export function specOfNote(note: string | undefined): ProcessSpec | null {
  if (!note) return null;
  let n: Record<string, unknown>;
  try {
    n = JSON.parse(note);
  } catch {
    return null;
  }
  if (typeof n !== "object" || n === null || n.v !== 1 || typeof n.cmd !== "string") return null;
  const strings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === "string");
  const env =
    typeof n.env === "object" && n.env !== null && !Array.isArray(n.env) && Object.values(n.env).every((x) => typeof x === "string") ? (n.env as Record<string, string>) : {};
  const pty = n.pty as { rows?: unknown; cols?: unknown } | undefined;
  return {
    cmd: n.cmd,
    args: strings(n.args) ? n.args : [],
    env,
    ...(typeof n.cwd === "string" ? { cwd: n.cwd } : {}),
    ...(typeof n.user === "string" ? { user: n.user } : {}),
    ...(typeof n.tag === "string" ? { tag: n.tag } : {}),
    stdin: n.stdin === true,
    ...(pty && Number.isInteger(pty.rows) && Number.isInteger(pty.cols) ? { pty: { rows: pty.rows as number, cols: pty.cols as number } } : {}),
  };
}

/**
 * Adopts every process the guest holds detached into `table` (nothing when the agent has no
 * `adopt` feature or holds none). A process started without a note (a plain exec whose client is
 * gone) is adopted too, so it is listed and can be reconnected to, but its stdin is closed: nobody
 * is left to write to it. Returns the adopted processes.
 */
export async function adoptDetached(guest: Guest, table: ProcessTable): Promise<TrackedProcess[]> {
  if (!guest.supports("adopt")) return [];
  const hello = await guest.hello;
  if (!hello.detached) return [];
  const { procs } = await guest.request<"procs">({ op: "procs" });
  const adopted: TrackedProcess[] = [];
  for (const p of procs.slice(0, 4096)) {
    // One that cannot be adopted (it ended and was forgotten meanwhile) leaves the others be.
    const t = await adoptOne(guest, table, p).catch(() => null);
    if (t) adopted.push(t);
  }
  return adopted;
}

async function adoptOne(guest: Guest, table: ProcessTable, p: DetachedProcess): Promise<TrackedProcess | null> {
  if (!Number.isSafeInteger(p.id) || !Number.isSafeInteger(p.pid) || p.pid <= 0) return null;
  const spec = specOfNote(p.note);
  const session = guest.adopt(p.id, !!p.stdin);
  if (!spec && session.stdin) session.stdin.end();
  const cmd = typeof p.cmd === "string" ? p.cmd : "";
  const own: ProcessSpec = spec ?? { cmd: cmd.split(" ")[0] || "?", args: cmd.split(" ").slice(1), env: {}, stdin: false };
  // A tag a running process already has (a process started again since) is not taken twice.
  if (own.tag !== undefined && table.list().some((x) => x.spec.tag === own.tag)) delete own.tag;
  return table.adopt(own, session);
}
