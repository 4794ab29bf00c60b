// The first step of `forgevm setup`: the Debian packages ForgeVM runs with (QEMU, debootstrap,
// the firewall's and the jail's tools). A checkout's ./setup.sh installed them already; an
// installation from the npm package gets them here: installed when setup runs as root, else
// named with the command that installs them.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { run } from "../util/process.js";
import { debianPackages } from "./install.js";

const exec = promisify(execFile);

/** The packages of `names` that dpkg does not have installed; null where there is no dpkg. */
export async function missingPackages(names: string[]): Promise<string[] | null> {
  const r = await exec("dpkg-query", ["-W", `-f=\${Package} \${Status}\\n`, ...names]).catch((e: { stdout?: string; code?: unknown }) =>
    // dpkg-query exits 1 when a package is unknown, and still prints the ones it knows.
    typeof e.stdout === "string" ? { stdout: e.stdout } : null,
  );
  if (!r) return null;
  const installed = new Set(
    r.stdout
      .split("\n")
      .filter((l) => l.endsWith(" install ok installed"))
      .map((l) => l.split(" ")[0]),
  );
  return names.filter((n) => !installed.has(n));
}

export async function ensureSystemPackages(log: (m: string) => void): Promise<void> {
  const wanted = debianPackages("run");
  const missing = await missingPackages(wanted);
  if (missing === null) {
    log(`system packages: no dpkg here to check them; ForgeVM needs these (Debian's names): ${wanted.join(" ")}`);
    return;
  }
  if (!missing.length) {
    log("system packages: already installed");
    return;
  }
  if (process.getuid?.() !== 0)
    throw new Error(`these Debian packages are missing: ${missing.join(" ")}. Install them (sudo apt-get install ${missing.join(" ")}) or run forgevm setup as root`);
  log(`system packages: installing ${missing.join(" ")}`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  await run("apt-get", ["update", "-qq"], { env });
  await run("apt-get", ["install", "-y", "-qq", "--no-install-recommends", ...missing], { env });
}
