// A thousand sandboxes on one host: N sandboxes of the default image are created (each writes its
// own id into a file), all but R of them paused; the list of all N is timed; random paused ones
// are resumed and given an exec, each against a restore from the base (a create and its first exec) timed
// in the same phase; every running one and every woken one still has its own file; then all are
// destroyed. Beside it, the server's memory, open files, inotify instances and event-loop delay,
// the VMMs running and the data directory's size on disk, sampled as the count grows. The server
// runs in this process. Exits 1 when a check fails, with the JSON saying which.
// Usage: node dist/bench/density.js [--count 1000] [--running 50] [--lanes 2] [--wakes 20]
import { execFile } from "node:child_process";
import { readdir, readFile, readlink, writeFile } from "node:fs/promises";
import { basename } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { promisify } from "node:util";
import { parseArgs } from "node:util";
import { SERVER_AUTOGROUP_NICE, startServer } from "../src/compose/serve.js";
import { isQemuCommand } from "../src/providers/qemu/runtime.js";
import { benchConfig } from "./data-dir.js";
import { restApi } from "./rest.js";
import { pct, tail as summary, machine } from "./stats.js";

const { values } = parseArgs({
  options: {
    count: { type: "string", default: "1000" },
    running: { type: "string", default: "50" },
    lanes: { type: "string", default: "2" },
    wakes: { type: "string", default: "20" },
  },
});
const COUNT = Number(values.count);
const RUNNING = Math.min(COUNT, Number(values.running));
const LANES = Number(values.lanes);
const WAKES = Math.min(COUNT - RUNNING, Number(values.wakes));
const run = promisify(execFile);
const problems: string[] = [];
const check = (ok: boolean, what: string) => {
  if (!ok) problems.push(what);
};

/** What this process holds open, by kind, and the VMMs of this data directory. */
async function holdings(dataDir: string) {
  const fds = await readdir("/proc/self/fd");
  const kinds: Record<string, number> = {};
  await Promise.all(
    fds.map(async (fd) => {
      const to = await readlink(`/proc/self/fd/${fd}`).catch(() => "gone");
      const kind = to.startsWith("socket:") ? "socket" : to.startsWith("anon_inode:") ? to.slice(11).replace(/[[\]]/g, "") : to.startsWith("pipe:") ? "pipe" : "file";
      kinds[kind] = (kinds[kind] ?? 0) + 1;
    }),
  );
  let vmms = 0;
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    const argv = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    if (isQemuCommand(argv) && argv.includes(dataDir)) vmms++;
  }
  const { stdout } = await run("du", ["-s", "-B1", dataDir]);
  return { open_files: fds.length, by_kind: kinds, vmms, disk_mib: Math.round(Number(stdout.split("\t")[0]) / 1048576), rss_mib: Math.round(process.memoryUsage().rss / 1048576) };
}

async function main() {
  await writeFile("/proc/self/autogroup", String(SERVER_AUTOGROUP_NICE)).catch(() => console.error("# the session's scheduling group could not be raised (not root?)"));
  const cfg = await benchConfig((c) => {
    c.defaults.ttl = "24h";
  });
  const server = await startServer(cfg, "bench");
  const api = restApi(server.url);
  const exec = async (id: string, command: string) => {
    const r = await api("POST", `/sandboxes/${id}/exec`, { command });
    if (r.exit_code !== 0) throw new Error(`${id}: ${command} exited ${r.exit_code}: ${r.stderr}`);
    return r.stdout as string;
  };
  /**
   * A restore from the base: a create and its first exec, the baseline a wake is held to. Its exec
   * reads a file, as a wake's does (`cat`: a process the guest starts, which under TCG is most of
   * a first exec's cost), so that the two differ only in how the VM came back.
   */
  const restore = async () => {
    const t0 = performance.now();
    const sb = await api("POST", "/sandboxes", {});
    await exec(sb.id, "cat /etc/hostname");
    const ms = performance.now() - t0;
    await api("DELETE", `/sandboxes/${sb.id}`);
    return ms;
  };
  // The first create makes the base snapshot: not measured.
  await restore();
  const before = await holdings(cfg.data_dir);
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();

  // Create: each writes its id where a wake reads it back; all but the last RUNNING are paused.
  const ids: string[] = new Array(COUNT);
  const createMs: number[] = [];
  const pauseMs: number[] = [];
  const samples: Record<string, unknown>[] = [];
  const errors: string[] = [];
  let next = 0;
  let made = 0;
  const t0 = performance.now();
  const lane = async () => {
    for (let i = next++; i < COUNT; i = next++) {
      try {
        const c0 = performance.now();
        const sb = await api("POST", "/sandboxes", { metadata: { n: String(i) } });
        await exec(sb.id, `echo ${sb.id} > /root/id && sync`);
        createMs.push(performance.now() - c0);
        ids[i] = sb.id;
        if (i < COUNT - RUNNING) {
          const p0 = performance.now();
          await api("POST", `/sandboxes/${sb.id}/pause`);
          pauseMs.push(performance.now() - p0);
        }
      } catch (e) {
        errors.push(`#${i}: ${(e as Error).message.slice(0, 200)}`);
      }
      if (++made % Math.max(1, Math.floor(COUNT / 10)) === 0) {
        const h = await holdings(cfg.data_dir);
        samples.push({ sandboxes: made, s: Math.round((performance.now() - t0) / 1000), ...h });
        console.error(`# ${made} sandboxes: ${JSON.stringify(h)}`);
      }
    }
  };
  await Promise.all(Array.from({ length: LANES }, lane));
  const createWallS = Math.round((performance.now() - t0) / 1000);
  check(errors.length === 0, `${errors.length} creates or pauses failed`);
  const full = await holdings(cfg.data_dir);

  // List all of them: every one there once, in the state it was left in.
  const listMs: number[] = [];
  let listed: { id: string; state: string }[] = [];
  for (let i = 0; i < 20; i++) {
    const l0 = performance.now();
    listed = await api("GET", "/sandboxes?state=creating,running,paused");
    listMs.push(performance.now() - l0);
  }
  const byState: Record<string, number> = {};
  for (const s of listed) byState[s.state] = (byState[s.state] ?? 0) + 1;
  const made_ = ids.filter(Boolean);
  check(listed.length === made_.length && new Set(listed.map((s) => s.id)).size === made_.length, `the list has ${listed.length} sandboxes, ${made_.length} were made`);
  check((byState.paused ?? 0) === made_.length - RUNNING || errors.length > 0, `${byState.paused ?? 0} are paused, ${made_.length - RUNNING} were`);
  check(pct(listMs, 50) <= 100, `listing ${listed.length} takes ${pct(listMs, 50)} ms at p50 (at most 100)`);

  // Every running one has its own file; random paused ones are resumed, and an exec reads theirs.
  let lost = 0;
  for (const id of ids.slice(COUNT - RUNNING).filter(Boolean)) if ((await exec(id, "cat /root/id")).trim() !== id) lost++;
  const paused = ids.slice(0, COUNT - RUNNING).filter(Boolean);
  const wakeMs: number[] = [];
  const resumeMs: number[] = [];
  const restoreMs: number[] = [];
  let fromBlank = 0;
  for (let i = 0; i < WAKES; i++) {
    restoreMs.push(await restore());
    const id = paused.splice(Math.floor(Math.random() * paused.length), 1)[0];
    const w0 = performance.now();
    await api("POST", `/sandboxes/${id}/resume`);
    resumeMs.push(performance.now() - w0);
    const out = await exec(id, "cat /root/id");
    wakeMs.push(performance.now() - w0);
    if (basename(server.forge.sandboxes.get(id).vm_dir ?? "").startsWith("blank-")) fromBlank++;
    if (out.trim() !== id) lost++;
    await api("POST", `/sandboxes/${id}/pause`);
  }
  check(lost === 0, `${lost} sandboxes lost their file`);
  const wakeVsRestore = Math.round((pct(wakeMs, 50) / pct(restoreMs, 50)) * 100) / 100;
  check(!(wakeVsRestore > 1.2), `a wake's first exec takes ${wakeVsRestore}× a restore from the base (at most 1.2)`);

  // Destroy them all: nothing is left running, open or on disk.
  const d0 = performance.now();
  const destroyMs: number[] = [];
  let k = 0;
  const all = ids.filter(Boolean);
  await Promise.all(
    Array.from({ length: LANES }, async () => {
      for (let i = k++; i < all.length; i = k++) {
        const x0 = performance.now();
        await api("DELETE", `/sandboxes/${all[i]}`);
        destroyMs.push(performance.now() - x0);
      }
    }),
  );
  const destroyWallS = Math.round((performance.now() - d0) / 1000);
  loop.disable();
  const after = await holdings(cfg.data_dir);
  // What may stay: the VMMs started ahead for the next spawns and the next resumes (snapshots.prestart each), 4 sockets apiece.
  const ahead = 2 * cfg.snapshots.prestart;
  check(after.vmms <= before.vmms + ahead, `${after.vmms} VMMs left against ${before.vmms} before`);
  check(after.open_files <= before.open_files + 4 * ahead + 4, `${after.open_files} files open against ${before.open_files} before`);
  const accel = (await server.forge.providers.health()).accel;
  await server.close();
  const perPaused = (full.disk_mib - before.disk_mib) / Math.max(1, made_.length);
  console.log(
    JSON.stringify(
      {
        benchmark: "density",
        date: new Date().toISOString(),
        machine: machine(accel),
        what: `${COUNT} sandboxes of the default image, ${RUNNING} running and the rest paused, ${LANES} created at a time`,
        create_and_first_exec_ms: summary(createMs),
        pause_ms: summary(pauseMs),
        create_wall_s: createWallS,
        errors: errors.slice(0, 5),
        list_ms: summary(listMs),
        listed: byState,
        wake_first_exec_ms: summary(wakeMs),
        wake_resume_answer_ms: summary(resumeMs),
        wakes_into_vmms_started_ahead: fromBlank,
        restore_from_base_ms: summary(restoreMs),
        wake_vs_restore_p50: wakeVsRestore,
        lost,
        destroy_ms: summary(destroyMs),
        destroy_wall_s: destroyWallS,
        disk_mib_per_sandbox: Math.round(perPaused * 100) / 100,
        before,
        full,
        after,
        samples,
        event_loop_delay_max_ms: Math.round(loop.max / 1e6),
        event_loop_delay_p99_ms: Math.round(loop.percentile(99) / 1e6),
        problems,
      },
      null,
      2,
    ),
  );
  process.exit(problems.length ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
