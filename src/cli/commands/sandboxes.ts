// Sandbox commands: spawn, list (ps), inspect, extend, kill, rm, start, stop, restart, pause, resume, logs.
import { resolve as resolvePath } from "node:path";
import { MEMORY_MB } from "../../schemas/bounds.js";
import { InvalidArgumentError, type Command } from "commander";
import type { LogLine, SandboxInfo, SpawnOptions } from "forgevm";
import type { Cli } from "../context.js";
import { findProjectFile, PROJECT_FILE } from "../project/find.js";
import { commaListOption, durationOption, egressHeaderOption, intOption, listOption, nonEmpty, pairOption, ttlOption } from "../options.js";
import { emit, table } from "../output.js";
import { withSpawnProgress } from "../spawn-progress.js";

/** The options every command that makes a sandbox takes (spawn, run). */
export function sandboxOptions(c: Command): Command {
  return c
    .option("-i, --image <name>", "image (default: the server's, forgevm/debian:bookworm)")
    .option("--template <name>", "a stored template whose settings fill in the rest")
    .option("-m, --memory <mib>", "memory in MiB", intOption("--memory", MEMORY_MB.minimum, MEMORY_MB.maximum))
    .option("-c, --vcpus <n>", "vCPUs", intOption("--vcpus", 1, 64))
    .option("--disk <mib>", "disk size in MiB", intOption("--disk", 64, 1048576))
    .option("-e, --env <NAME=VALUE>", "environment of every command in it (repeatable)", pairOption("--env"))
    .option("--secret <NAME=VALUE>", "a secret: every command's environment and /run/secrets/NAME, never stored (repeatable)", pairOption("--secret"))
    .option("--network <mode>", "none (loopback only), allowlist (listed hosts through the egress proxy) or full (internet, never the host)")
    .option("--allow <entry>", "egress allowlist entry: host, *.domain, IP/CIDR, :port, @preset (repeatable)", listOption)
    .option("-p, --publish <spec>", "publish a guest port: [ADDRESS:]HOST:GUEST, e.g. 8080:80 (repeatable)", listOption)
    .option(
      "--egress-header <HOST:NAME=VALUE>",
      "allowlist network: a header the egress proxy adds to requests for HOST, secrets by placeholder, e.g. 'api.openai.com:Authorization=Bearer {{OPENAI_KEY}}' (repeatable)",
      egressHeaderOption,
    )
    .option("--deny <cidr>", "allowlist network: open egress to every public destination but these addresses or CIDR networks; --deny '' for none (repeatable)", listOption)
    .option("--cache", "allowlist network: package files fetched over HTTP go through the host's package cache")
    .option("-v, --volume <NAME:/path[:ro]>", "mount a named volume (created if missing) or a host directory /dir:/path[:ro] (repeatable)", listOption)
    .option("--name <name>", "a name to use instead of its id anywhere")
    .option("--provider <name>", "the provider to run it on (forgevm doctor lists them; default: the server's)")
    .option("--idle-stop <duration>", "stop it (disk kept) after this long without exec, file calls or port traffic", durationOption("--idle-stop"))
    .option("--idle-pause <duration>", "pause it after this long with nothing in flight; any later call or connection resumes it", durationOption("--idle-pause"))
    .option("--no-idle", "never pause or stop it when idle (overrides the server's defaults.idle)")
    .option("--forkable", "keep its RAM in a file of its own: forks stop it only to copy that file, pauses copy nothing")
    .option("--forward <kinds>", "credentials forwarded from the host while it runs: ssh-agent, git (comma-separated)", commaListOption)
    .option("--system", "boot the image's systemd as init, the agent as its service (a system image does by itself; --no-system: never)")
    .option("--no-system", "boot without the image's systemd, even for a system image")
    .option("--screen <WxH[@DPI]>", "a desktop sandbox's screen (the image forgevm/desktop:bookworm), e.g. 1280x800 or 1280x800@120", screenOption)
    .option("-l, --label <KEY=VALUE>", "a label in its metadata (repeatable; `Sandbox.list` and E2B's filters match them)", pairOption("--label"))
    .option("--owner <id>", "whose sandbox it is (as the X-User-ID header: lists filtered by owner show it)");
}

/** The spawn request those options stand for (every field the API takes but `start` and `main`, which the verb decides). */
export function spawnRequest(o: Record<string, any>): SpawnOptions {
  return {
    image: o.image,
    template: o.template,
    provider: o.provider,
    memory_mb: o.memory,
    vcpus: o.vcpus,
    disk_mb: o.disk,
    ttl: o.ttl,
    env: nonEmpty(o.env),
    secrets: nonEmpty(o.secret),
    network: o.network,
    allow: o.allow,
    egress_rules: o.egressHeader,
    deny: o.deny?.filter((d: string) => d !== ""),
    ports: o.publish,
    // The name goes in the metadata too, where earlier releases kept it.
    metadata: o.name || o.label ? { ...(o.label ?? {}), ...(o.name ? { name: o.name } : {}) } : undefined,
    owner_id: o.owner,
    // Who commands run as by default (run's -u is also its command's user, as docker run -u).
    user: o.user,
    name: o.name,
    idle_stop: o.idleStop,
    idle: idleRequest(o),
    // A relative host directory is relative to here, as Docker's -v $PWD/x is.
    volumes: (o.volume as string[] | undefined)?.map((v) => (v.startsWith("./") || v.startsWith("../") ? `${resolvePath(v.split(":")[0])}:${v.split(":").slice(1).join(":")}` : v)),
    cache: o.cache,
    forkable: o.forkable,
    forward: o.forward,
    system: o.system,
    screen: o.screen,
  };
}

/** --screen 1280x800 or 1280x800@120. */
function screenOption(v: string): { width: number; height: number; dpi?: number } {
  const m = /^(\d{3,4})x(\d{3,4})(?:@(\d{2,3}))?$/.exec(v.trim());
  if (!m) throw new InvalidArgumentError(`--screen must be WIDTHxHEIGHT or WIDTHxHEIGHT@DPI, e.g. 1280x800 or 1280x800@120 (got "${v}")`);
  return { width: Number(m[1]), height: Number(m[2]), ...(m[3] ? { dpi: Number(m[3]) } : {}) };
}

/** --idle-pause, or --no-idle (commander sets `idle` false), as the request's `idle`. */
function idleRequest(o: Record<string, any>): { after: string; action: "pause" | "none" } | undefined {
  if (o.idlePause && o.idleStop) throw new InvalidArgumentError("--idle-pause and --idle-stop are two idle actions: give one");
  if (o.idlePause && o.idle === false) throw new InvalidArgumentError("--idle-pause and --no-idle contradict each other: give one");
  if (o.idlePause) return { after: o.idlePause, action: "pause" };
  if (o.idle === false) return { after: "1s", action: "none" };
  return undefined;
}

const mainState = (s: SandboxInfo) => {
  const m = s.main;
  if (!m) return "-";
  if (m.running) return `up (${[m.restart, m.health?.status].filter(Boolean).join(", ")})`;
  // Started and not ended, but not running now: held with its sandbox (paused, memory kept).
  if (m.started_at && m.finished_at === null && m.exit_code === null) return s.state === "paused" ? `paused (${m.restart})` : s.state;
  return m.exit_code !== null ? `exited ${m.exit_code}` : m.finished_at ? "ended" : "not started";
};
const row = (s: SandboxInfo) => [
  s.id,
  s.name ?? s.metadata?.name ?? "-",
  s.state,
  s.image,
  mainState(s),
  `${s.memory_mb}M`,
  s.vcpus,
  s.state === "error" ? (s.error ?? "") : (s.expires_at ?? "never"),
];
const HEADER = ["ID", "NAME", "STATE", "IMAGE", "MAIN", "MEM", "CPUS"];
const STATES = ["created", "creating", "running", "paused", "stopped", "destroyed", "error"];

export function sandboxCommands(program: Command, cli: Cli): void {
  sandboxOptions(program.command("spawn").description("create a sandbox on the server and print its id"))
    .option("-u, --user <user>", "who its commands run as by default (image: the image's USER)")
    .option("--ttl <duration>", "lifetime, e.g. 30m or 1h (0: until removed)", ttlOption("--ttl"))
    .option("--json", "print the sandbox as JSON")
    .action(async (o) => {
      const client = await cli.client();
      const sb = await withSpawnProgress(client, () => client.spawn(spawnRequest(o)));
      if (sb.info.warning && !o.json) console.error(`warning: ${sb.id} runs on provider ${sb.info.provider}, ${sb.info.warning}`);
      emit(o.json, sb.info, () => console.log(sb.id));
    });

  program
    .command("ps")
    .alias("ls")
    .alias("list")
    .description("list live sandboxes (with --all, stopped, failed and destroyed ones too, with the reason)")
    .option("-a, --all", "include sandboxes that are stopped, failed or destroyed")
    .option("--state <state>", `only sandboxes in this state (${STATES.join(", ")}; repeatable)`, (v: string, acc: string[] = []) => {
      if (!STATES.includes(v)) throw new InvalidArgumentError(`--state must be one of ${STATES.join(", ")}`);
      return [...acc, v];
    })
    .option("-q, --quiet", "print only the ids, one per line")
    .option("--json", "print JSON")
    .option("--no-project", `in a project's directory (a ${PROJECT_FILE} here or above), list every sandbox, not only the project's`)
    .action(async (o: { all?: boolean; state?: string[]; quiet?: boolean; json?: boolean; project: boolean }) => {
      // Live means paused too, as docker ps lists paused containers.
      const state = o.state ?? (o.all ? undefined : ["creating", "running", "paused"]);
      let list = await (await cli.client()).list({ all: o.all, state: state as never });
      const file = o.project ? findProjectFile() : null;
      if (file) {
        const p = (await import("../project/file.js")).readProject(file);
        list = list.filter((s) => s.metadata?.["forgevm.project"] === p.name && s.metadata?.["forgevm.project.dir"] === p.dir);
        if (!o.json && !o.quiet) console.error(`(project ${p.name}'s sandboxes, from ${file}; --no-project lists every one)`);
      }
      if (o.quiet && !o.json) {
        for (const s of list) console.log(s.id);
        return;
      }
      emit(o.json, list, () => table([...HEADER, o.all || o.state ? "EXPIRES / ERROR" : "EXPIRES"], list.map(row), "no sandboxes"));
    });

  program
    .command("inspect")
    .alias("get")
    .description("everything the server knows about a sandbox (also one that failed, with its reason)")
    .argument("<id>", "sandbox id")
    .option("--json", "print JSON (the default)")
    .action(async (id: string) => {
      console.log(JSON.stringify(await (await cli.client()).info(id), null, 2));
    });

  program
    .command("extend")
    .description("give a sandbox a new expiry, this long from now")
    .argument("<id>", "sandbox id")
    .argument("<ttl>", "lifetime from now, e.g. 30m or 2h (0: until removed)", ttlOption("ttl"))
    .option("--json", "print the sandbox as JSON")
    .action(async (id: string, ttl: string, o: { json?: boolean }) => {
      const sb = await (await (await cli.client()).get(id)).extendTtl(ttl);
      emit(o.json, sb.info, () => console.log(sb.info.expires_at ? `${sb.id} expires at ${sb.info.expires_at}` : `${sb.id} lives until it is removed`));
    });

  program
    .command("kill")
    .alias("destroy")
    .description("destroy sandboxes; with -s, send a signal to their main process instead")
    .argument("<id...>", "sandbox ids or names")
    .option("-s, --signal <signal>", "send this signal (SIGTERM, HUP, 9…) to the main process; the sandbox stays")
    .option("--json", "print JSON")
    .action(async (ids: string[], o: { signal?: string; json?: boolean }) => {
      const client = await cli.client();
      if (o.signal !== undefined) {
        for (const id of ids) await client.kill(id, /^\d+$/.test(o.signal) ? Number(o.signal) : o.signal);
        emit(o.json, { signalled: ids, signal: o.signal }, () => console.log(ids.join("\n")));
        return;
      }
      for (const id of ids) {
        await client.destroy(id);
        if (!o.json) console.log(`destroyed ${id}`);
      }
      if (o.json) console.log(JSON.stringify({ destroyed: ids }));
    });

  program
    .command("rm")
    .description("remove sandboxes that are not running (stopped, paused); -f removes running ones too")
    .argument("<id...>", "sandbox ids or names")
    .option("-f, --force", "remove running sandboxes too")
    .option("--json", "print JSON")
    .action(async (ids: string[], o: { force?: boolean; json?: boolean }) => {
      const client = await cli.client();
      if (!o.force) {
        // Every one that is running, named at once (as Docker does), before any is removed.
        const running: string[] = [];
        for (const id of ids) {
          const info = await client.info(id);
          if (info.state === "running" || info.state === "creating") running.push(`${id} (${info.state})`);
        }
        if (running.length)
          throw new InvalidArgumentError(
            `${running.length === 1 ? "this sandbox is" : "these sandboxes are"} running: ${running.join(", ")}: stop ${running.length === 1 ? "it" : "them"} first, or use rm -f`,
          );
      }
      for (const id of ids) {
        await client.destroy(id);
        if (!o.json) console.log(id);
      }
      if (o.json) console.log(JSON.stringify({ removed: ids }));
    });

  for (const [verb, what] of [
    ["start", "start stopped sandboxes again (files as they were; the main process runs anew)"],
    ["stop", "stop running sandboxes: SIGTERM to the main process, SIGKILL after the timeout; disk kept, no memory used"],
    ["restart", "stop (when running) and start sandboxes"],
    ["pause", "pause running sandboxes: memory, processes and streams kept, no VM held; any later call resumes them"],
    ["resume", "resume paused sandboxes as they were"],
  ] as const) {
    const c = program.command(verb).description(what).argument("<id...>", "sandbox ids or names").option("--json", "print JSON");
    if (verb === "pause") c.option("--disk-only", "keep the disk only: no memory image, and the resume boots cold (processes gone)");
    if (verb === "stop" || verb === "restart") c.option("-t, --timeout <duration>", "grace period before SIGKILL (default 10s)", durationOption("--timeout"));
    c.action(async (ids: string[], o: { timeout?: string; json?: boolean; diskOnly?: boolean }) => {
      const client = await cli.client();
      const done: SandboxInfo[] = [];
      for (const id of ids) {
        if (verb === "stop" || verb === "restart") done.push(await client[verb](id, { timeout: o.timeout }));
        else if (verb === "pause") done.push(await client.pause(id, o.diskOnly ? { memory: false } : {}));
        else done.push(await client[verb](id));
      }
      emit(o.json, done, () => console.log(ids.join("\n")));
    });
  }

  program
    .command("logs")
    .description("the main process's output (timestamped); the serial console for sandboxes without one, or with --console (kept after it is gone)")
    .argument("<id>", "sandbox id or name")
    .option("-n, --tail <n>", "how many of the last lines", intOption("--tail", 1, 10_000_000))
    .option("--lines <n>", "the same as --tail", intOption("--lines", 1, 10_000_000))
    .option("--since <when>", 'lines since a time (RFC 3339) or a duration back ("10m")')
    .option("-f, --follow", "keep printing lines as they are written, until the sandbox stops")
    .option("-t, --timestamps", "print each line's time")
    .option("--console", "the serial console, not the main process")
    .option("--json", "print JSON")
    .action(async (id: string, o: { tail?: number; lines?: number; since?: string; follow?: boolean; timestamps?: boolean; console?: boolean; json?: boolean }) => {
      const client = await cli.client();
      const tail = o.tail ?? o.lines;
      // A destroyed sandbox has no record to show, but its console is kept.
      const info = o.console ? null : await client.info(id).catch(() => null);
      if (!info?.main) {
        if (o.follow || o.since) throw new InvalidArgumentError(`--follow and --since read a main process's output; sandbox ${id} has none (its console has no timestamps)`);
        const lines = await client.logs(id, tail ?? 100);
        emit(o.json, lines, () => console.log(lines.join("\n")));
        return;
      }
      const print = (l: LogLine) => {
        if (o.json) console.log(JSON.stringify(l));
        else (l.stream === "stderr" ? process.stderr : process.stdout).write(`${o.timestamps ? `${l.ts} ` : ""}${l.line}\n`);
      };
      if (o.follow) {
        for await (const l of client.followMainLogs(id, { tail, since: o.since })) print(l);
        return;
      }
      for (const l of await client.mainLogs(id, { tail, since: o.since })) print(l);
    });
}
