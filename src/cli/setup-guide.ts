// `forgevm setup`, guided: every step checked first and skipped when done (the system packages,
// then setup/index.ts), a question before anything optional (the code-interpreter image, the system and desktop images, the
// boot-time service), and at the end a test sandbox booted and a command run in it, timed. `-y`, or no terminal to ask on,
// takes the defaults. ./setup.sh runs it with `-y --no-test-sandbox`.
import { existsSync } from "node:fs";
import { createInterface } from "node:readline/promises";
import { pathsFor } from "../config/paths.js";
import { SYSTEM_UNIT } from "./commands/service.js";
import type { Cli } from "./context.js";

export interface GuideOptions {
  yes?: boolean;
  quiet?: boolean;
  testSandbox: boolean;
  /** Build the desktop image without asking. */
  desktop?: boolean;
}

/** An optional step: its question, its default, and whether it is done already. */
interface Choice {
  ask: string;
  default: boolean;
}

export async function guidedSetup(cli: Cli, o: GuideOptions, installService: () => Promise<void>): Promise<void> {
  const paths = pathsFor(await cli.dataDir());
  const say = (m: string) => (o.quiet ? undefined : console.log(`setup: ${m}`));
  const { BUILT_IN_IMAGES, SYSTEM_IMAGES, baseImageBuilt, ensureSystemImages } = await import("../setup/base-image.js");
  const SYSTEM_IMAGE = SYSTEM_IMAGES["debian-12"].name;
  const DESKTOP_IMAGE = SYSTEM_IMAGES.desktop.name;
  const [DEFAULT_IMAGE, CODE_IMAGE] = BUILT_IN_IMAGES.map((i) => i.name);
  const interactive = !o.yes && process.stdin.isTTY === true && process.stdout.isTTY === true;
  if (!o.yes && !interactive) say("no terminal to ask on: taking the defaults (-y says so)");
  const choose = async (c: Choice): Promise<boolean> => {
    if (!interactive) return c.default;
    const rl = createInterface({ input: process.stdin, output: process.stdout });
    try {
      const a = (await rl.question(`${c.ask} [${c.default ? "Y/n" : "y/N"}] `)).trim().toLowerCase();
      return a === "" ? c.default : a.startsWith("y");
    } finally {
      rl.close();
    }
  };
  const images = [DEFAULT_IMAGE];
  const codeBuilt = await baseImageBuilt(paths, CODE_IMAGE);
  if (codeBuilt || (await choose({ ask: `Build the code-interpreter image ${CODE_IMAGE} (Python with pandas and matplotlib, Node.js: a few minutes)?`, default: true })))
    images.push(CODE_IMAGE);
  else say(`image ${CODE_IMAGE}: skipped (forgevm setup builds it later)`);
  const systemBuilt = await baseImageBuilt(paths, SYSTEM_IMAGE);
  const system =
    !systemBuilt && (await choose({ ask: `Build the system image ${SYSTEM_IMAGE} (systemd as init, sshd, journald: forgevm image system debian-12 later)?`, default: false }));
  const desktop =
    !(await baseImageBuilt(paths, DESKTOP_IMAGE)) &&
    (o.desktop ||
      (await choose({ ask: `Build the desktop image ${DESKTOP_IMAGE} (XFCE, Firefox, noVNC for computer-use agents: forgevm image system desktop later)?`, default: false })));
  const hasSystemd = existsSync("/run/systemd/system");
  const serviceInstalled = existsSync(SYSTEM_UNIT);
  const service = hasSystemd && !serviceInstalled && (await choose({ ask: "Start the server at boot (a systemd service: forgevm service install)?", default: false }));

  const { runSetup } = await import("../setup/index.js");
  const lines: string[] = [];
  const log = (m: string) => (o.quiet ? lines.push(m) : say(m));
  await (await import("../setup/system-packages.js")).ensureSystemPackages(log);
  await runSetup(paths, log, { images });
  const systemImages = [...(system ? ["debian-12"] : []), ...(desktop ? ["desktop"] : [])];
  if (systemImages.length) await ensureSystemImages(paths, systemImages, log);
  if (service) await installService();
  else if (serviceInstalled) say("boot-time service: installed (forgevm service uninstall removes it)");

  if (!o.testSandbox) return;
  // The check a user would make: a sandbox, a command in it, how long that took.
  const client = await cli.dataDirClient();
  const t0 = performance.now();
  const sb = await client.spawn({ ttl: "5m", metadata: { "forgevm.setup": "test" } });
  try {
    const r = await sb.exec("uname -sr");
    if (r.exit_code !== 0) throw new Error(`the test sandbox's command failed (exit ${r.exit_code}): ${r.stderr.trim()}`);
    const s = ((performance.now() - t0) / 1000).toFixed(1);
    console.log(`setup: a test sandbox booted and ran \`uname -sr\` (${r.stdout.trim()}) in ${s} s: ready (forgevm run -- echo hello)`);
  } finally {
    await sb.destroy();
  }
}
