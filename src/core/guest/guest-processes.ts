// `top`: the processes a sandbox runs, read from the guest's /proc through the agent's file
// operations (no `ps` needed in the image). Only processes in the sandbox's cgroup are listed:
// the agent and the kernel's threads are the machine's, not the user's. Every field is parsed
// defensively: /proc is the guest's to forge.
import type { Sandbox } from "./sandbox.js";

export interface GuestProcess {
  pid: number;
  ppid: number;
  /** User name from the guest's /etc/passwd, else the uid. */
  user: string;
  /** One-letter state: R running, S sleeping, D disk wait, Z zombie, T stopped. */
  state: string;
  rss_bytes: number;
  /** User plus system CPU time so far. */
  cpu_seconds: number;
  command: string;
}

const CLK_TCK = 100; // the guest kernel's USER_HZ
const PAGE = 4096;
const SANDBOX_CGROUP = "0::/sandbox";
const MAX_PROCESSES = 4096;

/** The processes running in a sandbox, by pid. */
export async function guestProcesses(sb: Sandbox): Promise<GuestProcess[]> {
  const root = { uid: 0, gid: 0 };
  const pids = (await sb.listAllFiles("/proc", root))
    .filter((e) => e.type === "dir" && /^\d+$/.test(e.name))
    .map((e) => Number(e.name))
    .slice(0, MAX_PROCESSES);
  const users = await passwd(sb);
  const read = (path: string) => sb.readFile(path, 64 * 1024, root).then((b) => b.toString("utf8"));
  const all = await Promise.all(
    pids.map(async (pid): Promise<GuestProcess | null> => {
      try {
        const [cgroup, stat, cmdline, status, smaps] = await Promise.all([
          read(`/proc/${pid}/cgroup`),
          read(`/proc/${pid}/stat`),
          read(`/proc/${pid}/cmdline`),
          read(`/proc/${pid}/status`),
          read(`/proc/${pid}/smaps_rollup`).catch(() => ""),
        ]);
        // The sandbox's cgroup, or an exec's own below it.
        if (!cgroup.split("\n").some((l) => l === SANDBOX_CGROUP || l.startsWith(`${SANDBOX_CGROUP}/`))) return null;
        // pid (comm) state ppid …: comm may hold spaces and parentheses, so split after the last ")".
        const close = stat.lastIndexOf(")");
        const comm = stat.slice(stat.indexOf("(") + 1, close);
        const f = stat.slice(close + 2).split(" ");
        const num = (i: number) => (Number.isFinite(Number(f[i])) ? Number(f[i]) : 0);
        const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? -1);
        const args = cmdline.split("\0").filter(Boolean).join(" ");
        return {
          pid,
          ppid: num(1),
          user: users.get(uid) ?? String(uid),
          state: (f[0] ?? "?").slice(0, 1),
          // The page tables' count (smaps_rollup): the counter in stat lags on 6.1 kernels, where a
          // process's counts are folded in only now and then (an idle httpd showed one page).
          rss_bytes: smapsRss(smaps) ?? num(21) * PAGE,
          cpu_seconds: (num(11) + num(12)) / CLK_TCK,
          command: (args || `[${comm}]`).slice(0, 4096),
        };
      } catch {
        return null; // gone while we looked
      }
    }),
  );
  return all.filter((p): p is GuestProcess => p !== null).sort((a, b) => a.pid - b.pid);
}

/** Resident bytes from /proc/PID/smaps_rollup, or null where it says nothing (kernel threads). */
function smapsRss(text: string): number | null {
  const kb = /^Rss:\s+(\d+) kB/m.exec(text)?.[1];
  return kb === undefined ? null : Number(kb) * 1024;
}

async function passwd(sb: Sandbox): Promise<Map<number, string>> {
  const map = new Map<number, string>();
  const text = await sb
    .readFile("/etc/passwd", 1024 * 1024, { uid: 0, gid: 0 })
    .then((b) => b.toString("utf8"))
    .catch(() => "");
  for (const line of text.split("\n")) {
    const [name, , uid] = line.split(":");
    if (name && /^\d+$/.test(uid ?? "")) map.set(Number(uid), name);
  }
  return map;
}
