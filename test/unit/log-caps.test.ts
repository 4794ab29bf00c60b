// Logs a guest can make grow stay bounded on the host's disk: the console log, the egress log and a main process's log.
import assert from "node:assert/strict";
import { appendFile, mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { EgressLog, MAX_LOG_BYTES } from "../../src/net/egress-log.js";
import { ConsoleLog } from "../../src/providers/console-log.js";
import { capLog } from "../../src/core/sandboxes/main-process.js";

const dirs: string[] = [];
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});
const tmp = async () => {
  const d = await mkdtemp(join(tmpdir(), "forgevm-logcap-"));
  dirs.push(d);
  return d;
};

describe("log caps", () => {
  it("a main process log past its cap keeps its newest half, whole lines only", async () => {
    const file = join(await tmp(), "main.log");
    const max = 64 * 1024;
    for (let i = 0; i < 2000; i++) {
      await appendFile(file, `${JSON.stringify({ ts: new Date().toISOString(), stream: "stdout", line: `line ${i} ${"y".repeat(100)}` })}\n`);
      await capLog(file, max);
    }
    const text = await readFile(file, "utf8");
    assert.ok(text.length <= max, `main.log is ${text.length} bytes`);
    assert.ok(text.length > max / 4, "it keeps recent output");
    const lines = text
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as { line: string });
    assert.match(lines[lines.length - 1].line, /^line 1999 /);
  });

  it("a console flooded with 8 MiB keeps at most 1 MiB on disk, the newest output included", async () => {
    const file = join(await tmp(), "console.log");
    const log = new ConsoleLog(file);
    for (let i = 0; i < 8 * 64; i++) log.note(`${String(i).padStart(6, "0")} ${"x".repeat(16 * 1024 - 8)}\n`);
    log.note("the last line\n");
    log.close();
    const size = (await stat(file)).size;
    assert.ok(size <= 1024 * 1024, `console.log is ${size} bytes`);
    assert.ok(size > 256 * 1024, "it keeps recent output");
    assert.match(await readFile(file, "utf8"), /the last line\n$/);
    assert.match(log.getTail(), /the last line\n$/);
  });

  it("an egress log stops at its cap with one line saying so, also across a restart", async () => {
    const dir = await tmp();
    const entry = { ts: new Date().toISOString(), method: "GET", host: "h".repeat(200), port: 80, decision: "deny" as const, reason: "r".repeat(300) };
    let log = new EgressLog(dir);
    const lineBytes = Buffer.byteLength(JSON.stringify(entry)) + 1;
    const half = Math.floor(MAX_LOG_BYTES / lineBytes / 2);
    for (let i = 0; i < half; i++) log.append("sb-1", entry);
    // a new server process picks up the size already on disk
    log = new EgressLog(dir);
    for (let i = 0; i < half * 2; i++) log.append("sb-1", entry);
    const size = await log.bytes("sb-1");
    assert.ok(size <= MAX_LOG_BYTES, `egress log is ${size} bytes`);
    const last = (await log.tail("sb-1", 1))[0] as unknown as { note?: string };
    assert.match(last.note ?? "", /log full/);
    // control: another sandbox's log is unaffected
    log.append("sb-2", entry);
    assert.equal((await log.tail("sb-2", 5)).length, 1);
  });
});
