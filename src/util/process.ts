// Running host programs (qemu-img, mkfs.ext4, …) with their output captured for error messages.
import { spawn, type SpawnOptions } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

export class CommandError extends Error {
  override name = "CommandError";
  constructor(
    message: string,
    readonly command: string,
    readonly exitCode: number | null,
    readonly stderr: string,
  ) {
    super(message);
  }
}

/** Runs a program to completion; rejects with its stderr tail when it fails or cannot start. */
export function run(cmd: string, args: string[], opts: SpawnOptions & { input?: Buffer | string; maxOutput?: number } = {}): Promise<{ stdout: string; stderr: string }> {
  const max = opts.maxOutput ?? 4 * 1024 * 1024;
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { ...opts, stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout!.on("data", (d) => {
      if (stdout.length < max) stdout += d;
    });
    child.stderr!.on("data", (d) => {
      stderr = (stderr + d).slice(-max);
    });
    child.on("error", (e: NodeJS.ErrnoException) => {
      const hint = e.code === "ENOENT" ? ` (is it installed? run ./setup.sh)` : "";
      reject(new CommandError(`cannot run ${cmd}: ${e.message}${hint}`, cmd, null, ""));
    });
    child.on("close", (code) => {
      if (code === 0) resolve({ stdout, stderr });
      else {
        const tail = stderr.trim().split("\n").slice(-8).join("\n");
        reject(new CommandError(`${cmd} ${args.join(" ")} failed with exit code ${code}${tail ? `:\n${tail}` : ""}`, cmd, code, stderr));
      }
    });
    child.stdin!.on("error", () => {}); // a program that exits without reading its input
    child.stdin!.end(opts.input ?? "");
  });
}

/** /proc/PID/stat's fields after the name (which may hold spaces): state, parent, process group, session, … (null when it is gone). */
function statFields(pid: number): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  } catch {
    return null;
  }
}

/**
 * Whether a process exists and has not exited. A zombie counts as exited: a VM adopted from a
 * dead server is not our child, and some container inits are slow to reap (or never reap) it.
 */
export function processAlive(pid: number): boolean {
  const f = statFields(pid);
  return !!f && f[0] !== "Z";
}

/**
 * CPU seconds a process has used, and with `children` those of its children it has waited for
 * (and theirs, as each waited in turn); null when it is gone. The kernel counts in clock ticks
 * of 1/100 s on every Linux ABI.
 */
export function cpuSeconds(pid: number, children = false): number | null {
  const f = statFields(pid);
  if (!f) return null;
  const ticks = [11, 12, ...(children ? [13, 14] : [])].reduce((sum, i) => sum + Number(f[i]), 0);
  return ticks / 100;
}

/** The live processes (no zombie) of the process group `pgid`, its leader left out. */
export function groupMembers(pgid: number): number[] {
  const found: number[] = [];
  for (const name of readdirSync("/proc")) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid === pgid) continue;
    const f = statFields(pid);
    if (f && f[0] !== "Z" && Number(f[2]) === pgid) found.push(pid);
  }
  return found;
}

/** A process's session id (null when it is gone). */
export function sessionOf(pid: number): number | null {
  const f = statFields(pid);
  return f ? Number(f[3]) : null;
}
