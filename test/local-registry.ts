// Test helper: Debian's docker-registry on a free loopback port, and images pushed to it by
// skopeo from layouts the tests write.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { run } from "../src/util/process.js";
import { freePort } from "./ports.js";
import { writeImage, writeIndex, writeMultiArch, type ImageSpec } from "./oci-writer.js";

export interface LocalRegistry {
  /** host:port */
  host: string;
  /** Where its blobs are stored (tests tamper with them). */
  storage: string;
  stop(): void;
}

/** Starts a registry keeping its storage under `work` (with `login`, only that user may use it); resolves once it answers. */
export async function startRegistry(work: string, login?: { username: string; password: string }): Promise<LocalRegistry> {
  const host = `127.0.0.1:${await freePort()}`;
  const storage = join(work, "storage");
  const config = join(work, "registry.yml");
  let auth = "";
  if (login) {
    // htpasswd wants bcrypt: the host's crypt(3) makes it.
    const { stdout } = await run("python3", ["-W", "ignore", "-c", "import crypt, sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))", login.password]);
    await writeFile(join(work, "htpasswd"), `${login.username}:${stdout.trim()}\n`);
    auth = `auth:\n  htpasswd:\n    realm: test\n    path: ${join(work, "htpasswd")}\n`;
  }
  await writeFile(
    config,
    `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${storage}\n  delete:\n    enabled: true\nhttp:\n  addr: ${host}\n${auth}`,
  );
  const proc: ChildProcess = spawn("docker-registry", ["serve", config], { stdio: "ignore" });
  const end = Date.now() + 15_000;
  while (
    !(await fetch(`http://${host}/v2/`).then(
      (r) => r.status === 200 || (!!login && r.status === 401),
      () => false,
    ))
  ) {
    if (proc.exitCode !== null || Date.now() > end) {
      proc.kill("SIGKILL");
      throw new Error(`docker-registry did not start on ${host}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { host, storage, stop: () => proc.kill("SIGTERM") };
}

/**
 * Writes an image (or, with `arm`, a two-platform index over it) into a fresh layout under
 * `work` and pushes it as `repoTag`; returns the digest pushed.
 */
export async function pushImage(reg: LocalRegistry, work: string, repoTag: string, spec: ImageSpec, arm?: ImageSpec): Promise<string> {
  const layout = await mkdtemp(join(work, "layout-"));
  const amd = await writeImage(layout, spec);
  let top: { digest: string } = amd;
  if (arm) top = await writeMultiArch(layout, [await writeImage(layout, { ...arm, architecture: "arm64" }), amd]);
  await writeIndex(layout, [{ tag: "t", descriptor: top }]);
  await run("skopeo", ["copy", "--quiet", ...(arm ? ["--all"] : []), "--dest-tls-verify=false", `oci:${layout}:t`, `docker://${reg.host}/${repoTag}`]);
  return top.digest;
}
