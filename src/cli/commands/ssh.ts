// ssh, scp, rsync, sftp and editors into sandboxes (docs/ssh.md). `ssh-config` writes a
// `Host forgevm-NAME` entry per sandbox whose ProxyCommand is `ssh-proxy`: it readies the guest's
// sshd for the user's public keys, pins the host key the server reports, then carries the
// connection over the server's WebSocket to the guest's port 22. `ssh` is the short form.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { appendFile, mkdir, readdir, readFile, writeFile, rename } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import type { Command } from "commander";
import type { Cli } from "../context.js";
import { emit } from "../output.js";

const BEGIN = "# >>> forgevm ssh-config: written by `forgevm ssh-config --install`; edits between these lines are replaced >>>";
const END = "# <<< forgevm ssh-config <<<";

const sshDir = () => join(homedir(), ".ssh");
const knownHostsFile = () => join(sshDir(), "forgevm_known_hosts");
/** The name a sandbox's host key is pinned under: its id, so a new sandbox of an old name is a new host. */
const hostKeyAlias = (id: string) => `forgevm-${id}`;

interface SshOptions {
  user?: string;
  key?: string[];
}

export function sshCommands(program: Command, cli: Cli): void {
  program
    .command("ssh-config")
    .description("print an ssh_config entry (Host forgevm-NAME) per sandbox, for ssh, scp, rsync, sftp and VS Code Remote-SSH; --install writes them into ~/.ssh/config")
    .option("--install", "add (or update) the entries in ~/.ssh/config, in a block this command owns")
    .option("-u, --user <user>", "the guest account to log in as (default: each sandbox's user, else root)")
    .option("--key <file>", "the public key to authorize (repeatable; default: ~/.ssh/*.pub, else the ssh agent's keys)", collect)
    .option("--json", "print the entries as JSON")
    .action(async (o: SshOptions & { install?: boolean; json?: boolean }) => {
      const client = await cli.client();
      const boxes = (await client.list()).filter((s) => s.state === "running" || s.state === "paused" || s.state === "stopped");
      const entries = boxes.map((s) => ({ host: `forgevm-${s.name ?? s.id}`, id: s.id, user: o.user ?? s.user ?? "root", state: s.state }));
      const block = [BEGIN, ...entries.flatMap((e) => hostBlock(e, proxyCommand(cli, e.id, o.key), o.key)), "Host *", END].join("\n");
      if (!o.install) return emit(o.json, entries, () => console.log(block));
      const file = join(sshDir(), "config");
      await installBlock(file, block);
      console.error(`forgevm: ${entries.length} sandbox ${entries.length === 1 ? "entry" : "entries"} in ${file}${entries.length ? ` (e.g. ssh ${entries[0].host})` : ""}`);
    });

  program
    .command("ssh")
    .description("open an ssh session in a sandbox (or run CMD there); ssh's own options go after --")
    .argument("<id>", "sandbox id or name")
    .argument("[command...]", "a command to run instead of a login shell")
    .option("-u, --user <user>", "the guest account to log in as (default: the sandbox's user, else root)")
    .option("--key <file>", "the public key to authorize (repeatable; default: ~/.ssh/*.pub, else the ssh agent's keys)", collect)
    .action(async (id: string, command: string[], o: SshOptions) => {
      const client = await cli.client();
      const s = await client.info(id);
      const user = o.user ?? s.user ?? "root";
      const args = [
        ...["-o", `ProxyCommand=${proxyCommand(cli, s.id, o.key)}`],
        ...["-o", `HostKeyAlias=${hostKeyAlias(s.id)}`],
        ...["-o", `UserKnownHostsFile=${knownHostsFile()}`],
        ...["-o", "StrictHostKeyChecking=yes"],
        ...identity(o.key),
        ...["-l", user, `forgevm-${s.name ?? s.id}`],
        ...command,
      ];
      process.exitCode = await new Promise<number>((done, fail) => {
        const child = spawn("ssh", args, { stdio: "inherit" });
        child.on("error", (e) => fail(new Error(`cannot run ssh (${e.message}): install an OpenSSH client`)));
        child.on("exit", (code, signal) => done(code ?? (signal ? 128 : 1)));
      });
    });

  program
    .command("ssh-proxy", { hidden: true })
    .description("carry one ssh connection to a sandbox's port 22 (ssh's ProxyCommand; ssh-config writes it)")
    .argument("<id>", "sandbox id")
    .option("-u, --user <user>", "the guest account ssh logs in as (ssh's %r)")
    .option("--key <file>", "the public key to authorize (repeatable)", collect)
    .action(async (id: string, o: SshOptions) => {
      const client = await cli.client();
      const keys = await publicKeys(o.key);
      const access = await client.ssh(id, { publicKeys: keys, user: o.user }).catch((e: Error & { statusCode?: number }) => {
        if (e.statusCode === 404 && /^sandbox \S+ (not found|is destroyed)/.test(e.message))
          e.message += ": `forgevm ssh-config --install` rewrites the entries for the sandboxes there are";
        throw e;
      });
      await pin(hostKeyAlias(id), access.host_keys);
      const { url, apiKey } = await cli.endpoint();
      process.exitCode = await relay(`${url.replace(/^http/, "ws")}/api/v1/sandboxes/${encodeURIComponent(id)}/tcp/${access.port}`, apiKey);
    });
}

function collect(v: string, acc: string[] = []): string[] {
  return [...acc, v];
}

/** One ssh_config entry. */
function hostBlock(e: { host: string; id: string; user: string }, proxy: string, keys?: string[]): string[] {
  const ids = identity(keys).filter((_, i, all) => all[i - 1] === "-i");
  return [
    `Host ${e.host}`,
    `  HostName ${e.id}`,
    `  User ${e.user}`,
    `  ProxyCommand ${proxy}`,
    `  HostKeyAlias ${hostKeyAlias(e.id)}`,
    `  UserKnownHostsFile ${knownHostsFile()}`,
    "  StrictHostKeyChecking yes",
    ...ids.map((f) => `  IdentityFile ${f}`),
    ...(ids.length ? ["  IdentitiesOnly yes"] : []),
    "",
  ];
}

/** This very CLI with the options that reach the same server, running ssh-proxy; %r is ssh's login name. */
function proxyCommand(cli: Cli, id: string, keys?: string[]): string {
  const q = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `"${s.replace(/(["\\$`])/g, "\\$1")}"`);
  const words = [process.execPath, resolve(process.argv[1]), ...cli.sameServerArgs(), "ssh-proxy", "--user", "%r", ...(keys ?? []).flatMap((k) => ["--key", resolve(k)]), id];
  return words.map(q).join(" ");
}

/** -i for each named key's private half, so ssh offers the key that was authorized. */
function identity(keys?: string[]): string[] {
  return (keys ?? []).map((k) => resolve(k)).flatMap((k) => (k.endsWith(".pub") && existsSync(k.slice(0, -4)) ? ["-i", k.slice(0, -4), "-o", "IdentitiesOnly=yes"] : []));
}

/** The public keys to authorize: the files named, else ~/.ssh/*.pub, else the ssh agent's. */
async function publicKeys(files?: string[]): Promise<string[]> {
  if (files?.length) return Promise.all(files.map(async (f) => (await readFile(f, "utf8")).trim()));
  const dir = sshDir();
  const names = await readdir(dir).catch(() => [] as string[]);
  const found: string[] = [];
  for (const n of names.filter((n) => n.endsWith(".pub")).sort()) {
    const text = (await readFile(join(dir, n), "utf8").catch(() => "")).trim();
    if (/^(ssh-|ecdsa-|sk-)/.test(text)) found.push(text.split("\n")[0]);
  }
  if (found.length) return found;
  const agent = await new Promise<string>((done) => {
    const p = spawn("ssh-add", ["-L"], { stdio: ["ignore", "pipe", "ignore"] });
    let out = "";
    p.stdout.on("data", (c) => (out += c));
    p.on("error", () => done(""));
    p.on("close", (code) => done(code === 0 ? out : ""));
  });
  const fromAgent = agent.split("\n").filter((l) => /^(ssh-|ecdsa-|sk-)/.test(l));
  if (fromAgent.length) return fromAgent;
  throw new Error("no public key to authorize: make one with `ssh-keygen -t ed25519`, or name one with --key FILE.pub");
}

/**
 * Pins the sandbox's host keys under its alias, once: the server told them over the API, so the
 * first connection asks nothing; a later key that differs is refused by ssh (StrictHostKeyChecking).
 */
async function pin(alias: string, keys: string[]): Promise<void> {
  const file = knownHostsFile();
  const now = await readFile(file, "utf8").catch(() => "");
  if (now.split("\n").some((l) => l.split(" ")[0] === alias)) return;
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  await appendFile(file, keys.map((k) => `${alias} ${k.split(" ").slice(0, 2).join(" ")}\n`).join(""), { mode: 0o644 });
}

/** Relays standard input and output over the tunnel's WebSocket until either side ends; ssh's exit code on failure. */
async function relay(wsUrl: string, apiKey?: string): Promise<number> {
  const { default: WebSocket } = await import("ws");
  const ws = new WebSocket(wsUrl, { headers: apiKey ? { "X-API-Key": apiKey } : {} });
  return new Promise<number>((done) => {
    ws.on("open", () => {
      process.stdin.on("data", (c: Buffer) => {
        ws.send(c, { binary: true });
        if (ws.bufferedAmount > 1 << 20) {
          process.stdin.pause();
          const wait = setInterval(() => {
            if (ws.bufferedAmount > 1 << 18) return;
            clearInterval(wait);
            process.stdin.resume();
          }, 5);
        }
      });
      process.stdin.on("end", () => ws.close(1000));
    });
    ws.on("message", (data: Buffer) => {
      if (!process.stdout.write(data)) {
        ws.pause();
        process.stdout.once("drain", () => ws.resume());
      }
    });
    ws.on("close", (code, reason) => {
      if (code >= 4000) console.error(`forgevm: ${reason.toString() || `the tunnel closed (${code})`}`);
      process.stdin.pause();
      done(code === 1000 || code === 1005 ? 0 : 255);
    });
    ws.on("error", (e) => {
      console.error(`forgevm: cannot reach the sandbox's port through ${wsUrl.replace(/\/api\/.*/, "")}: ${e.message}`);
      done(255);
    });
  });
}

/** Replaces this command's block in an ssh config file, or puts it first (an entry's options win over later ones). */
async function installBlock(file: string, block: string): Promise<void> {
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  const now = await readFile(file, "utf8").catch(() => "");
  const start = now.indexOf(BEGIN);
  const end = now.indexOf(END);
  const rest = start >= 0 && end > start ? now.slice(0, start) + now.slice(end + END.length).replace(/^\n/, "") : now;
  const next = `${block}\n${rest}`;
  const tmp = `${file}.forgevm-${process.pid}`;
  await writeFile(tmp, next, { mode: 0o600 });
  await rename(tmp, file);
}
