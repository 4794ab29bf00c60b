// `forgevm status`: what runs here and what to update, in one look. The versions (ForgeVM, QEMU,
// the guest kernel, the images, the ssh server for guests), the server (through its API when one
// answers: its accelerator and its sandboxes), the boot-time service, the data directory's disk
// use, and each thing to update with the command that does it. It changes nothing: with no server
// running it reports what the files say.
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { readFile, readdir, stat, statfs } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import type { Command } from "commander";
import { pathsFor } from "../../config/paths.js";
import type { Cli } from "../context.js";
import { emit } from "../output.js";
import { SYSTEM_UNIT } from "./service.js";
import { INSTALL_ROOT as INSTALL, INSTALLED_AS, INSTALLED_AS_WORDS } from "../../setup/install.js";

const run = promisify(execFile);

export function statusCommands(program: Command, cli: Cli, version: string): void {
  program
    .command("status")
    .description("versions (ForgeVM, QEMU, guest kernel, images), the accelerator, the server and its sandboxes, the service, disk use, and what to update")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const paths = pathsFor(await cli.dataDir());
      const json = <T>(f: string) =>
        readFile(f, "utf8").then(
          (t) => JSON.parse(t) as T,
          () => null,
        );
      const kernel = await json<{ package: string; version: string }>(join(paths.kernelDir, "kernel.json"));
      const ssh = await json<{ packages: Record<string, string> }>(join(paths.sshServer, "bundle.json"));
      const qemu = await run("qemu-system-x86_64", ["--version"]).then(
        (r) => /version (\S+)/.exec(r.stdout)?.[1] ?? "?",
        () => null,
      );
      const images = await builtImages(paths.imagesDir);
      const server = await serverState(cli);
      const service = existsSync(SYSTEM_UNIT) ? await serviceState() : "not installed";
      const disk = await diskUse(paths.dataDir);
      const updates: string[] = [];
      if (!kernel || !existsSync(paths.initramfs)) updates.push("the data directory is not set up: forgevm setup");
      else if (await agentDiffers(paths.agentBinary)) updates.push("the guest agent was rebuilt since the initramfs: forgevm setup (new sandboxes get it)");
      if (!ssh) updates.push("no ssh server for guests: forgevm setup");
      if (!qemu) updates.push("QEMU is not installed: forgevm setup (as root), or apt-get install qemu-system-x86");
      const status = {
        forgevm: { version, from: INSTALL, installed_as: INSTALLED_AS, node: process.version },
        qemu,
        kernel: kernel ? `${kernel.package} ${kernel.version}` : null,
        images,
        ssh_server: ssh ? `openssh-server ${ssh.packages["openssh-server"]}, rsync ${ssh.packages.rsync}` : null,
        data_dir: paths.dataDir,
        server,
        service,
        disk,
        updates,
      };
      emit(o.json, status, () => {
        console.log(`ForgeVM ${version} (${INSTALLED_AS_WORDS}, Node.js ${process.version})`);
        console.log(`QEMU: ${qemu ?? "not installed"}`);
        console.log(`guest kernel: ${status.kernel ?? "not installed"}`);
        console.log(`images: ${images.length ? images.map((i) => `${i.name} (${i.created})`).join(", ") : "none"}`);
        console.log(`ssh server for guests: ${status.ssh_server ?? "not built"}`);
        console.log(`data directory: ${paths.dataDir}, ${gib(disk.used_bytes)} used, ${gib(disk.free_bytes)} free on its filesystem`);
        if (server.url)
          console.log(
            `server: ${server.url}, ${server.accel ? `accel ${server.accel}, ` : ""}sandboxes ${
              Object.entries(server.sandboxes ?? {})
                .map(([k, v]) => `${v} ${k}`)
                .join(", ") || "none"
            }`,
          );
        else console.log("server: not running (forgevm serve, or forgevm service install)");
        console.log(`boot-time service: ${service}`);
        console.log(updates.length ? `to update:\n${updates.map((u) => `  ${u}`).join("\n")}` : "to update: nothing");
      });
    });
}

const gib = (b: number) => `${(b / 2 ** 30).toFixed(1)} GiB`;

/** The images in the store, with when each was made. */
async function builtImages(dir: string): Promise<{ name: string; created: string }[]> {
  const out: { name: string; created: string }[] = [];
  const walk = async (d: string, depth: number): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) {
      if (!e.isDirectory()) continue;
      const meta = await readFile(join(d, e.name, "image.json"), "utf8").then(
        (t) => JSON.parse(t) as { name?: string; createdAt?: string },
        () => null,
      );
      if (meta?.name) out.push({ name: meta.name, created: meta.createdAt?.slice(0, 10) ?? "?" });
      else if (depth < 4) await walk(join(d, e.name), depth + 1);
    }
  };
  await walk(dir, 0);
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

/** The server of this data directory (or the one named), asked for its accelerator and sandboxes; nulls when none answers. */
async function serverState(cli: Cli): Promise<{ url: string | null; accel: string | null; sandboxes: Record<string, number> | null }> {
  const s = await cli.serverUrl();
  if (!s) return { url: null, accel: null, sandboxes: null };
  try {
    const client = await cli.client();
    const list = await client.list();
    const sandboxes: Record<string, number> = {};
    for (const sb of list) sandboxes[sb.state] = (sandboxes[sb.state] ?? 0) + 1;
    const qemu = await client.provider("qemu").catch(() => null);
    return { url: s.url, accel: (qemu?.config.accel as string | undefined) ?? null, sandboxes };
  } catch {
    return { url: null, accel: null, sandboxes: null };
  }
}

async function serviceState(): Promise<string> {
  const q = (verb: string) =>
    run("systemctl", [verb, "forgevm.service"]).then(
      (r) => r.stdout.trim(),
      (e: { stdout?: string }) => e.stdout?.trim() || "unknown",
    );
  return `installed (${await q("is-enabled")}, ${await q("is-active")})`;
}

/** Bytes under the data directory (each file once, however many links) and free on its filesystem. */
async function diskUse(dir: string): Promise<{ used_bytes: number; free_bytes: number }> {
  const seen = new Set<string>();
  let used = 0;
  const walk = async (d: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else if (e.isFile()) {
        const st = await stat(p).catch(() => null);
        if (!st || seen.has(`${st.dev}:${st.ino}`)) continue;
        seen.add(`${st.dev}:${st.ino}`);
        used += st.blocks * 512;
      }
    }
  };
  await walk(dir);
  const fs = await statfs(dir).catch(() => null);
  return { used_bytes: used, free_bytes: fs ? fs.bavail * fs.bsize : 0 };
}

/** Whether the agent this installation built differs from the one the data directory's initramfs carries (setup copies it beside). */
async function agentDiffers(installed: string): Promise<boolean> {
  const built = await readFile(join(INSTALL, "agent", "build", "forgevm-agent")).catch(() => null);
  const packed = await readFile(installed).catch(() => null);
  return !!built && !!packed && !built.equals(packed);
}
