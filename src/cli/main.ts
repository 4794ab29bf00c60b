// The `forgevm` command line.
import { Command, InvalidArgumentError } from "commander";
import { readFileSync } from "node:fs";
import { Forge } from "../core/forge.js";
import { defaultDataDir, pathsFor } from "../config/paths.js";
import { runSetup } from "../setup/index.js";
import { serveForever } from "../api/serve.js";
import { ApiClient } from "./client.js";

const pkg = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { version: string };

function intOption(name: string, min: number, max: number) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max) throw new InvalidArgumentError(`${name} must be an integer from ${min} to ${max}`);
    return n;
  };
}

function envOption(v: string, acc: Record<string, string>) {
  const i = v.indexOf("=");
  if (i <= 0) throw new InvalidArgumentError(`--env takes NAME=VALUE, got "${v}"`);
  return { ...acc, [v.slice(0, i)]: v.slice(i + 1) };
}

function listOption(v: string, acc: string[] = []) {
  return [...acc, v];
}

const program = new Command("forgevm")
  .description("Disposable, isolated microVMs for AI agents and people")
  .version(pkg.version, "-V, --version")
  .option("--data-dir <dir>", "data directory (default: $FORGEVM_DATA_DIR or ~/.local/share/forgevm)")
  .option("--server <url>", "ForgeVM server URL (env FORGEVM_URL)", process.env.FORGEVM_URL ?? "http://127.0.0.1:7423")
  .option("--api-key <key>", "API key (env FORGEVM_API_KEY)", process.env.FORGEVM_API_KEY);

const dataDir = () => (program.opts().dataDir as string | undefined) ?? defaultDataDir();
const client = () => new ApiClient(program.opts().server as string, program.opts().apiKey as string | undefined);

interface SandboxView {
  id: string;
  state: string;
  image: string;
  memory_mb: number;
  vcpus: number;
  created_at: string;
  expires_at: string;
}

program
  .command("serve")
  .description("run the REST API server (port 7423 by default; see forgevm.yaml)")
  .option("--config <file>", "config file (default: ./forgevm.yaml, then ~/.forgevm/config.yaml)")
  .action(async (o: { config?: string }) => {
    if (program.opts().dataDir) process.env.FORGEVM_DATA_DIR = program.opts().dataDir;
    await serveForever(pkg.version, o.config);
  });

program
  .command("spawn")
  .description("create a sandbox on the server and print it")
  .option("-i, --image <name>", "image name")
  .option("--ttl <duration>", "lifetime, e.g. 30m or 1h")
  .option("-m, --memory <mib>", "memory in MiB", intOption("--memory", 64, 65536))
  .option("-c, --vcpus <n>", "vCPUs", intOption("--vcpus", 1, 64))
  .option("--network <mode>", "none (loopback only), allowlist (listed hosts through the egress proxy) or full (internet, never the host)")
  .option("--allow <entry>", "egress allowlist entry: host, *.domain, IP/CIDR, :port, @preset (repeatable)", listOption)
  .option("-p, --publish <spec>", "publish a guest port: [ADDRESS:]HOST:GUEST, e.g. 8080:80 (repeatable)", listOption)
  .option("--json", "print JSON")
  .action(async (o) => {
    const sb = await client().request<SandboxView>("POST", "/sandboxes", {
      image: o.image,
      ttl: o.ttl,
      memory_mb: o.memory,
      vcpus: o.vcpus,
      network: o.network,
      allow: o.allow,
      ports: o.publish,
    });
    console.log(o.json ? JSON.stringify(sb, null, 2) : sb.id);
  });

program
  .command("list")
  .alias("ls")
  .description("list live sandboxes")
  .option("--json", "print JSON")
  .action(async (o: { json?: boolean }) => {
    const list = await client().request<SandboxView[]>("GET", "/sandboxes");
    if (o.json) return console.log(JSON.stringify(list, null, 2));
    if (!list.length) return console.log("no sandboxes");
    console.log(["ID", "STATE", "IMAGE", "MEM", "CPUS", "EXPIRES"].join("\t"));
    for (const s of list) console.log([s.id, s.state, s.image, `${s.memory_mb}M`, s.vcpus, s.expires_at].join("\t"));
  });

program
  .command("exec")
  .description("run a command in a sandbox, streaming its output; exits with its exit code")
  .argument("<id>", "sandbox id")
  .argument("<command...>", "command (use -- before it)")
  .option("-t, --timeout <duration>", "e.g. 30s")
  .option("-w, --workdir <dir>", "working directory")
  .option("-u, --user <user>", "user to run as")
  .option("-e, --env <NAME=VALUE>", "environment variable (repeatable)", envOption, {})
  .action(async (id: string, command: string[], o) => {
    const body = {
      command: command[0],
      args: command.length > 1 ? command.slice(1) : undefined,
      timeout: o.timeout,
      workdir: o.workdir,
      user: o.user,
      env: Object.keys(o.env).length ? o.env : undefined,
      stream: true,
    };
    const res = await client().fetch("POST", `/sandboxes/${encodeURIComponent(id)}/exec`, body);
    if (!res.ok) {
      const e = (await res.json().catch(() => ({}))) as { message?: string };
      throw new Error(e.message ?? `HTTP ${res.status}`);
    }
    let buf = "";
    let code = 1;
    const dec = new TextDecoder();
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += dec.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = JSON.parse(buf.slice(0, nl)) as { stream: string; data: string; exit_code?: number };
        buf = buf.slice(nl + 1);
        if (line.stream === "stdout") process.stdout.write(line.data);
        else if (line.stream === "stderr") process.stderr.write(line.data);
        else if (line.stream === "exit") code = line.exit_code ?? 1;
        else if (line.stream === "error") console.error(`forgevm: ${line.data}`);
      }
    }
    process.exitCode = code;
  });

program
  .command("kill")
  .alias("destroy")
  .description("destroy sandboxes")
  .argument("<id...>", "sandbox ids")
  .action(async (ids: string[]) => {
    for (const id of ids) {
      await client().request("DELETE", `/sandboxes/${encodeURIComponent(id)}`);
      console.log(`destroyed ${id}`);
    }
  });

program
  .command("logs")
  .description("print the last lines of a sandbox's console")
  .argument("<id>", "sandbox id")
  .option("-n, --lines <n>", "how many lines", intOption("--lines", 1, 100000), 100)
  .option("--json", "print JSON")
  .action(async (id: string, o: { lines: number; json?: boolean }) => {
    const lines = await client().request<string[]>("GET", `/sandboxes/${encodeURIComponent(id)}/logs?lines=${o.lines}`);
    console.log(o.json ? JSON.stringify(lines, null, 2) : lines.join("\n"));
  });

interface SnapshotView {
  id: string;
  name?: string;
  kind: string;
  image: string;
  memory_mb: number;
  size_bytes: number;
  source_id?: string;
  created_at: string;
}

program
  .command("snapshot")
  .description("snapshot a running sandbox (memory, processes and disk); it keeps running")
  .argument("<id>", "sandbox id")
  .argument("[name]", "name to restore it by")
  .option("--json", "print JSON")
  .action(async (id: string, name: string | undefined, o: { json?: boolean }) => {
    const snap = await client().request<SnapshotView>("POST", `/sandboxes/${encodeURIComponent(id)}/snapshot`, name ? { name } : {});
    console.log(o.json ? JSON.stringify(snap, null, 2) : snap.id);
  });

program
  .command("snapshots")
  .description("list snapshots, or show one")
  .argument("[snapshot]", "id or name of one snapshot to show")
  .option("--json", "print JSON")
  .action(async (one: string | undefined, o: { json?: boolean }) => {
    if (one) return console.log(JSON.stringify(await client().request<SnapshotView>("GET", `/snapshots/${encodeURIComponent(one)}`), null, 2));
    const list = await client().request<SnapshotView[]>("GET", "/snapshots");
    if (o.json) return console.log(JSON.stringify(list, null, 2));
    if (!list.length) return console.log("no snapshots");
    console.log(["ID", "NAME", "KIND", "IMAGE", "MEM", "SIZE", "FROM", "CREATED"].join("\t"));
    for (const s of list) console.log([s.id, s.name ?? "-", s.kind, s.image, `${s.memory_mb}M`, `${Math.round(s.size_bytes / 1048576)}M`, s.source_id ?? "-", s.created_at].join("\t"));
  });

program
  .command("snapshot-rm")
  .description("delete snapshots (files stay until no sandbox restored from them runs)")
  .argument("<snapshot...>", "snapshot ids or names")
  .action(async (ids: string[]) => {
    for (const id of ids) {
      await client().request("DELETE", `/snapshots/${encodeURIComponent(id)}`);
      console.log(`deleted ${id}`);
    }
  });

const copies = (name: string, what: string, path: (id: string) => string) =>
  program
    .command(name)
    .description(what)
    .argument("<id>", name === "fork" ? "sandbox id" : "snapshot id or name")
    .option("-n, --count <n>", "how many copies", intOption("--count", 1, 32), 1)
    .option("--ttl <duration>", "lifetime of each copy, e.g. 30m")
    .option("--json", "print JSON")
    .action(async (id: string, o: { count: number; ttl?: string; json?: boolean }) => {
      const r = await client().request<{ sandboxes: SandboxView[]; pause_ms?: number }>("POST", path(id), { count: o.count, ttl: o.ttl });
      if (o.json) return console.log(JSON.stringify(r, null, 2));
      for (const s of r.sandboxes) console.log(s.id);
      if (r.pause_ms !== undefined) console.error(`parent paused ${r.pause_ms} ms`);
    });
copies("fork", "make running copies of a sandbox as it is now", (id) => `/sandboxes/${encodeURIComponent(id)}/fork`);
copies("restore", "start sandboxes from a snapshot", (id) => `/snapshots/${encodeURIComponent(id)}/spawn`);

interface NetworkView {
  mode: string;
  allow: string[];
  ports: { host_ip: string; host_port: number; guest_port: number }[];
  proxy?: string;
}

const netPath = (id: string, rest: string) => `/sandboxes/${encodeURIComponent(id)}/${rest}`;

program
  .command("egress")
  .description("show a sandbox's egress decisions (allowed and refused requests through its proxy)")
  .argument("<id>", "sandbox id")
  .option("-n, --lines <n>", "how many of the latest", intOption("--lines", 1, 100000), 100)
  .option("--json", "print JSON lines")
  .action(async (id: string, o: { lines: number; json?: boolean }) => {
    const list = await client().request<{ ts: string; method: string; host: string; port: number; decision: string; reason: string; address?: string }[]>(
      "GET",
      netPath(id, `egress?lines=${o.lines}`),
    );
    if (o.json) return list.forEach((e) => console.log(JSON.stringify(e)));
    if (!list.length) return console.log("no egress requests");
    for (const e of list) console.log([e.ts, e.decision.toUpperCase(), e.method, `${e.host}:${e.port}`, e.decision === "allow" ? (e.address ?? "") : e.reason].join("\t"));
  });

program
  .command("allow")
  .description("show or change a running sandbox's egress allowlist (takes effect on its next request)")
  .argument("<id>", "sandbox id")
  .argument("[entries...]", "new allowlist: hosts, *.domains, IPs/CIDRs, with :port, and @presets")
  .option("--add", "add the entries to the current list instead of replacing it")
  .option("--clear", "remove every entry (the sandbox can then reach nothing)")
  .action(async (id: string, entries: string[], o: { add?: boolean; clear?: boolean }) => {
    const c = client();
    let net = await c.request<NetworkView>("GET", netPath(id, "network"));
    if (entries.length || o.clear) {
      const allow = o.clear ? [] : o.add ? [...net.allow, ...entries] : entries;
      net = await c.request<NetworkView>("PUT", netPath(id, "network/allow"), { allow });
    }
    console.log(`network ${net.mode}${net.proxy ? ` (proxy ${net.proxy})` : ""}`);
    for (const a of net.allow) console.log(`  ${a}`);
  });

program
  .command("publish")
  .description("publish a port of a running sandbox on the host (127.0.0.1 unless an address is given)")
  .argument("<id>", "sandbox id")
  .argument("<spec>", "[ADDRESS:]HOST:GUEST, e.g. 8080:80; host port 0 picks a free one")
  .action(async (id: string, spec: string) => {
    const m = await client().request<NetworkView["ports"][number]>("POST", netPath(id, "ports"), { port: spec });
    console.log(`${m.host_ip}:${m.host_port} -> ${m.guest_port}`);
  });

program
  .command("unpublish")
  .description("stop publishing a host port of a sandbox")
  .argument("<id>", "sandbox id")
  .argument("<host-port>", "the host port", intOption("host-port", 1, 65535))
  .action(async (id: string, port: number) => {
    await client().request("DELETE", netPath(id, `ports/${port}`));
    console.log(`unpublished ${port}`);
  });

program
  .command("ports")
  .description("list a sandbox's published ports")
  .argument("<id>", "sandbox id")
  .action(async (id: string) => {
    const net = await client().request<NetworkView>("GET", netPath(id, "network"));
    if (!net.ports.length) return console.log("no published ports");
    for (const m of net.ports) console.log(`${m.host_ip}:${m.host_port} -> ${m.guest_port}`);
  });

program
  .command("version")
  .description("print the version")
  .action(() => console.log(`forgevm ${pkg.version}`));

program
  .command("setup")
  .description("fetch the guest kernel, build the initramfs and the default image (./setup.sh also installs packages)")
  .option("-q, --quiet", "print nothing when everything is already set up")
  .action(async (o: { quiet?: boolean }) => {
    const lines: string[] = [];
    await runSetup(pathsFor(dataDir()), (m) => (o.quiet ? lines.push(m) : console.log(`setup: ${m}`)));
  });

program
  .command("run")
  .description("boot a sandbox, run one command in it with output streamed, destroy it; exits with the command's code")
  .argument("<command...>", "command and arguments (use -- before it)")
  .option("-i, --image <name>", "image name", undefined)
  .option("-m, --memory <mib>", "memory in MiB", intOption("--memory", 64, 65536), 512)
  .option("-c, --cpus <n>", "vCPUs", intOption("--cpus", 1, 64), 1)
  .option("--disk <mib>", "disk size in MiB", intOption("--disk", 64, 1048576), 2048)
  .option("-t, --timeout <seconds>", "kill the command after this long (exit code 124)", intOption("--timeout", 1, 86400))
  .option("-e, --env <NAME=VALUE>", "environment variable (repeatable)", envOption, {})
  .option("-w, --workdir <dir>", "working directory in the guest")
  .option("-u, --user <user>", "user to run as")
  .option("--network <mode>", "none (loopback only), allowlist (listed hosts through the egress proxy) or full (internet, never the host)")
  .option("--allow <entry>", "egress allowlist entry, e.g. @pypi or example.com (repeatable)", listOption)
  .action(async (command: string[], o) => {
    const forge = await Forge.open({ dataDir: dataDir() });
    let stopping = false;
    const stop = async (code: number) => {
      if (stopping) return;
      stopping = true;
      await forge.close();
      process.exit(code);
    };
    process.once("SIGINT", () => void stop(130));
    process.once("SIGTERM", () => void stop(143));
    const sb = await forge.spawn({ image: o.image, memoryMb: o.memory, vcpus: o.cpus, diskMb: o.disk, network: o.network, allow: o.allow }).catch(async (e) => {
      await forge.close();
      throw e;
    });
    try {
      const s = sb.execStream(command.length === 1 ? command[0] : command, {
        env: o.env,
        cwd: o.workdir,
        user: o.user,
        timeoutMs: o.timeout ? o.timeout * 1000 : undefined,
      });
      s.stdout.pipe(process.stdout, { end: false });
      s.stderr.pipe(process.stderr, { end: false });
      const r = await s.result;
      if (r.timed_out) console.error(`forgevm: command timed out after ${o.timeout} s`);
      process.exitCode = r.exit_code;
    } finally {
      await forge.close();
    }
  });

/** Runs `fn` on a Forge of this machine's data directory (no server needed), then closes it. */
async function withLocalForge<T>(fn: (forge: Forge) => Promise<T>): Promise<T> {
  const forge = await Forge.open({ dataDir: dataDir(), reapIntervalMs: 0 });
  try {
    return await fn(forge);
  } finally {
    await forge.close();
  }
}

const progress = (m: string) => {
  if (process.stderr.isTTY) process.stderr.write("\r\x1b[K");
  console.error(`  ${m}`);
};

/** One progress bar per layer being downloaded, redrawn in place on a terminal. */
function layerBar(layer: { index: number; count: number; digest: string; size: number }, received: number): void {
  if (!process.stderr.isTTY) return;
  const width = 30;
  const frac = layer.size ? Math.min(1, received / layer.size) : 1;
  const bar = "#".repeat(Math.round(frac * width)).padEnd(width, " ");
  const mib = (n: number) => (n / 1048576).toFixed(1);
  process.stderr.write(`\r\x1b[K  layer ${layer.index + 1}/${layer.count} ${layer.digest.slice(7, 19)} [${bar}] ${Math.round(frac * 100)}% ${mib(received)}/${mib(layer.size)} MiB`);
}

function imageSummary(i: { name: string; digest?: string; size: number; layers?: string[] }, ms: number) {
  return `${i.name}\n  digest ${i.digest ?? "-"}\n  ${i.layers?.length ?? 0} layers, rootfs ${(i.size / 1048576).toFixed(0)} MiB, ${(ms / 1000).toFixed(1)} s`;
}

for (const name of ["pull", "build-image"]) {
  program
    .command(name)
    .description(name === "pull" ? "pull an image from its registry (e.g. alpine:latest, ghcr.io/org/app@sha256:…)" : "pull an image and build its root filesystem (same as pull)")
    .argument("<ref>", "image reference")
    .action(async (ref: string) => {
      const t0 = performance.now();
      const img = await withLocalForge((forge) => forge.pullImage(ref, progress, layerBar));
      console.log(imageSummary(img, performance.now() - t0));
    });
}

program
  .command("import")
  .description("import an image from an OCI layout directory, an OCI archive or a `docker save` tarball")
  .argument("<path>", "OCI layout directory, OCI archive (.tar) or docker save tarball")
  .option("-n, --name <name>", "name to store it under (a docker save tarball carries its own)")
  .option("-t, --tag <tag>", "which image of the layout (its ref.name annotation)")
  .action(async (dir: string, o: { name?: string; tag?: string }) => {
    const t0 = performance.now();
    const img = await withLocalForge((forge) => forge.importImage(dir, o.name, o.tag, progress));
    console.log(imageSummary(img, performance.now() - t0));
  });

program
  .command("rmi")
  .description("remove local images (refused while a sandbox uses one)")
  .argument("<name...>", "image names")
  .action(async (names: string[]) => {
    await withLocalForge(async (forge) => {
      for (const n of names) {
        await forge.removeImage(n);
        console.log(`removed ${n}`);
      }
      const pruned = await forge.pruneBlobs();
      if (pruned) console.log(`pruned ${pruned} unused blobs`);
    });
  });

program
  .command("images")
  .description("list local images")
  .option("--json", "print JSON")
  .action(async (o: { json?: boolean }) => {
    const rows = (await withLocalForge((forge) => forge.listImages())).map(({ inUse, ...m }) => ({ ...m, in_use: inUse }));
    if (o.json) return console.log(JSON.stringify(rows, null, 2));
    console.log(["NAME", "DIGEST", "SIZE", "CREATED", "IN USE"].join("\t"));
    for (const i of rows) console.log([i.name, i.digest?.slice(0, 19) ?? "-", `${(i.size / 1048576).toFixed(0)} MiB`, i.createdAt, i.in_use ? "yes" : "no"].join("\t"));
  });

program
  .command("doctor")
  .description("check QEMU, the kernel, the initramfs and the accelerator")
  .option("--json", "print JSON")
  .action(async (o: { json?: boolean }) => {
    const h = await withLocalForge((forge) => forge.providerHealth());
    if (o.json) console.log(JSON.stringify(h, null, 2));
    else {
      console.log(`provider ${h.name}: ${h.healthy ? "healthy" : "NOT healthy"}${h.accel ? `, accel ${h.accel}` : ""}`);
      for (const [k, v] of Object.entries(h.details)) console.log(`  ${k}: ${v}`);
      for (const p of h.problems) console.log(`  problem: ${p}`);
    }
    if (!h.healthy) process.exitCode = 1;
  });

program.parseAsync().catch((e: Error) => {
  console.error(`forgevm: ${e.message}`);
  process.exit(1);
});
