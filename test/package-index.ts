// Test fixture: a Debian package repository and a Python package index on a loopback port, made
// on the spot (no internet). The repository is flat (`deb [trusted=yes] URL/debian/ ./`) and
// holds forgevm-hello, a .deb made by dpkg-deb whose /usr/bin/forgevm-hello says hello. The index
// serves demo-env-pkg (a wheel made by the host's Python; `import demo_env_pkg` gives VALUE 42),
// Debian's pip wheel (for images without pip), and slow-pkg, whose page never comes.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { chmod, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { join, posix } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

export const DEB_HOST = "deb.test";
export const PY_HOST = "pypi.test";

export interface PackageIndex {
  port: number;
  /** Downloads of each file (and asks for slow-pkg). */
  hits: { deb: number; wheel: number; pipWheel: number; slow: number };
  /** The `environments` options that use this index (the names need `hostsOverride`, see `hostsOverride`). */
  sources: { pythonIndex: string; aptSources: string[] };
  hostsOverride: Record<string, string>;
  close(): void;
}

/** A .deb with /usr/bin/forgevm-hello, made by dpkg-deb. */
async function makeDeb(dir: string): Promise<Buffer> {
  const root = join(dir, "pkg");
  await mkdir(join(root, "DEBIAN"), { recursive: true });
  await mkdir(join(root, "usr/bin"), { recursive: true });
  await writeFile(join(root, "DEBIAN/control"), "Package: forgevm-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: Tests <tests@forgevm.invalid>\nDescription: says hello\n");
  await writeFile(join(root, "usr/bin/forgevm-hello"), "#!/bin/sh\necho hello from a deb\n");
  await chmod(join(root, "usr/bin/forgevm-hello"), 0o755);
  await run("dpkg-deb", ["--root-owner-group", "--build", root, join(dir, "hello.deb")]);
  return readFile(join(dir, "hello.deb"));
}

/** A wheel of `name` with VALUE = 42, made by the host's Python. */
async function makeWheel(dir: string, name: string): Promise<Buffer> {
  const file = join(dir, `${name}-1.0-py3-none-any.whl`);
  const script = `
import zipfile, sys
n = sys.argv[2]
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr(n + "/__init__.py", "VALUE = 42\\n")
    z.writestr(n + "-1.0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: " + n.replace("_", "-") + "\\nVersion: 1.0\\n")
    z.writestr(n + "-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
    z.writestr(n + "-1.0.dist-info/RECORD", "")
`;
  await run("python3", ["-c", script, file, name]);
  return readFile(file);
}

/** Makes the packages under `work` and serves them on a free loopback port. */
export async function startPackageIndex(work: string): Promise<PackageIndex> {
  const deb = await makeDeb(work);
  const debName = "forgevm-hello_1.0_all.deb";
  const packages = Buffer.from(
    `Package: forgevm-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: Tests <tests@forgevm.invalid>\nDescription: says hello\nFilename: pool/${debName}\nSize: ${deb.length}\nSHA256: ${sha256(deb)}\n\n`,
  );
  const release = Buffer.from(`Date: ${new Date(Date.now() - 86_400_000).toUTCString()}\nSHA256:\n ${sha256(packages)} ${packages.length} Packages\n`);
  const wheel = await makeWheel(work, "demo_env_pkg");
  const wheelName = "demo_env_pkg-1.0-py3-none-any.whl";
  const pipName = (await readdir("/usr/share/python-wheels")).find((w) => w.startsWith("pip-"));
  if (!pipName) throw new Error("no pip wheel in /usr/share/python-wheels (apt-get install python3-pip-whl)");
  const pipWheel = await readFile(join("/usr/share/python-wheels", pipName));
  const page = (file: string, body: Buffer) => `<html><body><a href="/packages/${file}#sha256=${sha256(body)}">${file}</a></body></html>`;
  const hits = { deb: 0, wheel: 0, pipWheel: 0, slow: 0 };
  const hanging = new Set<ServerResponse>();
  const sockets = new Set<Socket>();
  const files: Record<string, { body: Buffer | string; type: string; hit?: keyof typeof hits }> = {
    "/debian/Release": { body: release, type: "text/plain" },
    "/debian/Packages": { body: packages, type: "text/plain" },
    [`/debian/pool/${debName}`]: { body: deb, type: "application/vnd.debian.binary-package", hit: "deb" },
    "/simple/demo-env-pkg/": { body: page(wheelName, wheel), type: "text/html" },
    "/simple/pip/": { body: page(pipName, pipWheel), type: "text/html" },
    [`/packages/${wheelName}`]: { body: wheel, type: "application/octet-stream", hit: "wheel" },
    [`/packages/${pipName}`]: { body: pipWheel, type: "application/octet-stream", hit: "pipWheel" },
  };
  const server = createServer((req, res) => {
    const path = posix.normalize(decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname));
    if (path === "/simple/slow-pkg/") {
      hits.slow++;
      hanging.add(res); // answered never: a build waits here until it is cancelled
      return;
    }
    const f = files[path];
    if (!f) {
      res.statusCode = 404;
      return res.end("not here");
    }
    if (f.hit) hits[f.hit]++;
    res.setHeader("content-type", f.type);
    res.end(f.body);
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    hits,
    sources: { pythonIndex: `http://${PY_HOST}:${port}/simple/`, aptSources: [`deb [trusted=yes] http://${DEB_HOST}:${port}/debian/ ./`] },
    hostsOverride: { [DEB_HOST]: "127.0.0.1", [PY_HOST]: "127.0.0.1" },
    close() {
      for (const r of hanging) r.destroy();
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}
