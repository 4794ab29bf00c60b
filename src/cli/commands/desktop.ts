// `forgevm desktop ID` opens a desktop sandbox's live view (noVNC through the server) in a browser,
// or prints its URL; `forgevm screenshot ID -o shot.png` saves what its screen shows
// (the REST API's /sandboxes/{id}/desktop routes, docs/desktop.md).
import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { type Command, InvalidArgumentError } from "commander";
import type { Cli } from "../context.js";
import { emit } from "../output.js";

/** "X,Y,WIDTH,HEIGHT": a part of the screen. */
function region(v: string): { x: number; y: number; width: number; height: number } {
  const m = /^(\d+),(\d+),(\d+),(\d+)$/.exec(v.trim());
  if (!m) throw new InvalidArgumentError(`--region must be X,Y,WIDTH,HEIGHT in pixels, e.g. 0,0,640,480 (got "${v}")`);
  return { x: Number(m[1]), y: Number(m[2]), width: Number(m[3]), height: Number(m[4]) };
}

/** Opens `url` in the user's browser where there is a graphical session to open it in; whether it tried. */
function openInBrowser(url: string): boolean {
  if (process.platform !== "darwin" && !process.env.DISPLAY && !process.env.WAYLAND_DISPLAY) return false;
  const opener = process.platform === "darwin" ? "open" : "xdg-open";
  const child = spawn(opener, [url], { stdio: "ignore", detached: true });
  child.on("error", () => {});
  child.unref();
  return true;
}

export function desktopCommands(program: Command, cli: Cli): void {
  program
    .command("desktop")
    .description("open a desktop sandbox's live view in a browser (take over, or --view-only to watch), or print its URL")
    .argument("<id>", "sandbox id or name (of the image forgevm/desktop:bookworm)")
    .option("--view-only", "watch only: the desktop ignores the viewer's keys and clicks")
    .option("--ttl <duration>", "how long the URL works (default 1h, at most 24h)")
    .option("--no-open", "print the URL without opening a browser")
    .option("--json", "print JSON")
    .action(async (id: string, o: { viewOnly?: boolean; ttl?: string; open: boolean; json?: boolean }) => {
      const sandbox = await (await cli.client()).get(id);
      const stream = await sandbox.desktop.stream({ viewOnly: o.viewOnly, ttl: o.ttl });
      emit(o.json, stream, () => {
        const opened = o.open && openInBrowser(stream.url);
        console.log(`${opened ? "opened" : "open"} ${stream.url}`);
        console.log(`(${stream.view_only ? "watch only" : "take over"}; the URL works until ${stream.expires_at}; stop the view with: forgevm desktop-stop ${id})`);
      });
    });

  program
    .command("desktop-stop")
    .description("stop a desktop sandbox's live view (the desktop keeps running)")
    .argument("<id>", "sandbox id or name")
    .action(async (id: string) => {
      await (await cli.client()).get(id).then((s) => s.desktop.stopStream());
    });

  program
    .command("screenshot")
    .description("save what a desktop sandbox's screen shows (PNG, or JPEG by --format or the file's name)")
    .argument("<id>", "sandbox id or name (of the image forgevm/desktop:bookworm)")
    .requiredOption("-o, --output <file>", 'where to write it ("-": standard output)')
    .option("--format <format>", "png or jpeg (default: from the file's name, else png)")
    .option("--quality <n>", "JPEG quality, 1 to 100", (v) => Number(v))
    .option("--scale <factor>", "the image's size against the screen's, 0.1 to 1", (v) => Number(v))
    .option("--region <x,y,w,h>", "a part of the screen only", region)
    .option("--cursor", "draw the pointer")
    .action(async (id: string, o: { output: string; format?: string; quality?: number; scale?: number; region?: ReturnType<typeof region>; cursor?: boolean }) => {
      const format = (o.format ?? (/\.jpe?g$/i.test(o.output) ? "jpeg" : "png")).toLowerCase();
      if (format !== "png" && format !== "jpeg" && format !== "jpg") throw new InvalidArgumentError(`--format must be png or jpeg (got "${o.format}")`);
      const { client } = await cli.dataDirServer();
      const shot = await (await client.get(id)).desktop.screenshot({
        format: format === "png" ? "png" : "jpeg",
        quality: o.quality,
        scale: o.scale,
        region: o.region,
        cursor: o.cursor,
      });
      if (o.output === "-") process.stdout.write(shot);
      else {
        await writeFile(o.output, shot);
        console.error(`wrote ${o.output} (${shot.length} bytes)`);
      }
    });
}
