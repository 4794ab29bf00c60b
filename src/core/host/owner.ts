// One owner per data directory. Two processes driving the same VMs, store and snapshots would
// contradict each other (one destroys a sandbox whose VM the other keeps running), so whoever
// opens a data directory records itself in `owner.json` — its pid, and its address once it
// serves — and every later opener is refused with that record, or (the CLI) talks to it instead.
import { readFileSync, rmSync } from "node:fs";
import { link, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ForgevmError } from "../../http/errors.js";

/** Who has a data directory open. */
export interface Owner {
  pid: number;
  /** When that pid started (clock ticks since boot, from /proc): tells it from a later process that reused the pid. */
  start_ticks: number;
  /** Where it serves the API (null: a library or CLI command, not a server). */
  url: string | null;
  started_at: string;
}

/** The data directory is open in another live process. */
export class DataDirInUseError extends ForgevmError {
  override name = "DataDirInUseError";
  constructor(
    readonly dataDir: string,
    readonly owner: Owner,
  ) {
    super(
      "CONFLICT",
      owner.url
        ? `the data directory ${dataDir} is in use by forgevm serve (pid ${owner.pid}, ${owner.url}, since ${owner.started_at}): talk to that server, stop it first, or use another data directory (--data-dir, FORGEVM_DATA_DIR)`
        : `the data directory ${dataDir} is in use by process ${owner.pid} (since ${owner.started_at}), which is not a server: wait for it to finish, or use another data directory (--data-dir, FORGEVM_DATA_DIR)`,
    );
  }
}

/** Data directories open in this process (a second Forge on one would adopt the first one's VMs). */
const openHere = new Set<string>();

const ownerFile = (dataDir: string) => join(dataDir, "owner.json");

/** The live owner of a data directory, or null (none, or one that died without removing its record). */
export async function currentOwner(dataDir: string): Promise<Owner | null> {
  let owner: Owner;
  try {
    owner = JSON.parse(await readFile(ownerFile(dataDir), "utf8")) as Owner;
  } catch {
    return null;
  }
  if (!Number.isInteger(owner.pid) || owner.pid <= 0) return null;
  if (owner.pid === process.pid) return openHere.has(dataDir) ? owner : null;
  return isNodeProcess(owner.pid) && startTicks(owner.pid) === owner.start_ticks ? owner : null;
}

/** A claim on a data directory: released by `release`, and by the process's exit in any case. */
export interface Ownership {
  /** Records where this process serves the API, for CLI commands and refused servers to see. */
  announce(url: string): Promise<void>;
  release(): Promise<void>;
}

/** Takes a data directory, or throws DataDirInUseError naming its live owner. */
export async function claimDataDir(dataDir: string): Promise<Ownership> {
  const file = ownerFile(dataDir);
  const me: Owner = { pid: process.pid, start_ticks: startTicks(process.pid), url: null, started_at: new Date().toISOString() };
  if (openHere.has(dataDir)) throw new DataDirInUseError(dataDir, (await currentOwner(dataDir)) ?? me);
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, JSON.stringify(me));
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await link(tmp, file); // atomic: fails if anyone holds it
        break;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST" || attempt > 5) throw e;
      }
      const owner = await currentOwner(dataDir);
      if (owner) throw new DataDirInUseError(dataDir, owner);
      // A dead owner's record: remove it unless it changed meanwhile (a new owner won the race).
      const stale = await readFile(file, "utf8").catch(() => null);
      if (stale !== null && (await currentOwner(dataDir)) === null && (await readFile(file, "utf8").catch(() => null)) === stale) await rm(file, { force: true });
    }
  } finally {
    await rm(tmp, { force: true });
  }
  openHere.add(dataDir);
  const release = () => {
    // Only our own record: never one a later owner wrote.
    try {
      const cur = JSON.parse(readFileSync(file, "utf8")) as Owner;
      if (cur.pid !== process.pid) return;
    } catch {
      return;
    }
    rmSync(file, { force: true });
  };
  const onExit = () => release();
  process.once("exit", onExit);
  let current = me;
  return {
    async announce(url) {
      current = { ...current, url };
      await writeFile(`${file}.${process.pid}.tmp`, JSON.stringify(current));
      await rename(`${file}.${process.pid}.tmp`, file);
    },
    async release() {
      process.off("exit", onExit);
      release();
      openHere.delete(dataDir);
    },
  };
}

/** Whether a pid is a live Node process (a ForgeVM server, CLI or library user). */
export function isNodeProcess(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0].includes("node");
  } catch {
    return false;
  }
}

/** A process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or -1. */
function startTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]);
  } catch {
    return -1;
  }
}
