// The agent frameworks' sandbox providers that test/vm/frameworks.test.ts drives, in a package of
// their own (test/frameworks/: their peer ranges disagree with each other and with ours). The test
// runner installs them beside the unit tier, since only phase 2 needs them and their install is
// mostly waiting on the registry; `node dist/scripts/test-frameworks.js` installs them by hand.
import { execFile } from "node:child_process";
import { stat } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const FRAMEWORKS_DIR = fileURLToPath(new URL("../../test/frameworks/", import.meta.url));

/** Whether test/frameworks/node_modules is there and no older than its lock file. */
async function installed(): Promise<boolean> {
  const [lock, marker] = await Promise.all(["package-lock.json", "node_modules/.package-lock.json"].map((f) => stat(join(FRAMEWORKS_DIR, f)).catch(() => null)));
  return !!lock && !!marker && marker.mtimeMs >= lock.mtimeMs;
}

/**
 * Installs the providers with `npm ci` unless they are up to date; resolves with what it did,
 * rejects with npm's output when the install fails.
 */
export async function installFrameworks(): Promise<string> {
  if (await installed()) return "already installed";
  const t0 = performance.now();
  await new Promise<void>((resolve, reject) =>
    // At a lower priority: in the suite it runs beside the shared bases, which phase 2 waits for too.
    execFile("nice", ["-n", "10", "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: FRAMEWORKS_DIR, maxBuffer: 16 << 20 }, (err, stdout, stderr) =>
      err ? reject(new Error(`npm ci in ${FRAMEWORKS_DIR} failed: ${err.message}\n${stdout}${stderr}`)) : resolve(),
    ),
  );
  return `installed in ${((performance.now() - t0) / 1000).toFixed(1)} s`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  installFrameworks().then(
    (what) => console.log(`the agent frameworks' providers: ${what}`),
    (e: Error) => {
      console.error(e.message);
      process.exit(1);
    },
  );
}
