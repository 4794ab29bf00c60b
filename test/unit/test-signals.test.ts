// The test runner's stop on a signal (scripts/test-signals.ts), in a process of its own: a first
// SIGTERM stops the groups it owns and lets the run clean up, a second stops it at once.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { it } from "node:test";
import { fileURLToPath } from "node:url";
import { processAlive as alive } from "../../src/util/process.js";

const module = fileURLToPath(new URL("../../scripts/test-signals.js", import.meta.url));

// Two groups, one stopped by the first signal and one by the second only; it says what it saw.
const RUN = `
import { spawn } from "node:child_process";
const { listenForStop, ownGroup, stopSignal } = await import(${JSON.stringify(module)});
listenForStop();
const group = spawn("sleep", ["60"], { detached: true, stdio: "ignore" });
const last = spawn("sleep", ["60"], { detached: true, stdio: "ignore" });
group.once("exit", ownGroup(group.pid));
last.once("exit", ownGroup(last.pid, "last"));
group.once("exit", (code, sig) => console.log("group ended by " + sig));
// A runner: a leader that must not hear the signal, and a member (its file) that must.
const runner = spawn("sh", ["-c", "trap 'echo leader heard it' TERM; sleep 60 & echo member $!; wait; wait"], { detached: true, stdio: ["ignore", "pipe", "ignore"] });
runner.once("exit", ownGroup(runner.pid, "runner"));
runner.stdout.on("data", (d) => process.stdout.write(String(d)));
runner.once("exit", (code, sig) => console.log("runner ended by " + sig));
console.log(JSON.stringify({ group: group.pid, last: last.pid }));
const seen = setInterval(() => { if (stopSignal()) { console.log("stopped by " + stopSignal()); clearInterval(seen); } }, 20);
setInterval(() => {}, 1000);
`;

it("a first SIGTERM stops the run's groups and leaves the rest to its cleanup; a second ends it at once, its last groups too", async () => {
  const p = spawn(process.execPath, ["--input-type=module", "-e", RUN], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  p.stdout.on("data", (d) => (out += d));
  let err = "";
  p.stderr.on("data", (d) => (err += d));
  const lines = async (re: RegExp) => {
    for (let i = 0; i < 250 && !re.test(out); i++) await new Promise((r) => setTimeout(r, 20));
    assert.match(out, re, err);
  };
  let pids: { group: number; last: number } | undefined;
  try {
    await lines(/^\{.*\}$/m);
    pids = JSON.parse(/^\{.*\}$/m.exec(out)![0]) as { group: number; last: number };
    await lines(/^member \d+$/m);
    const member = Number(/^member (\d+)$/m.exec(out)![1]);
    p.kill("SIGTERM");
    await lines(/stopped by SIGTERM/);
    await lines(/group ended by SIGTERM/);
    // The runner's member is told, the runner itself is held and then killed, never told.
    await lines(/runner ended by SIGKILL/);
    assert.ok(!alive(member), "the runner's member ended");
    assert.doesNotMatch(out, /leader heard it/);
    assert.ok(alive(pids.last), "a last group outlives the first signal");
    assert.equal(p.exitCode, null, "the first signal leaves the run to end itself");
    assert.match(err, /SIGTERM: stopping the tests that run/);
    p.kill("SIGTERM");
    const [code] = await once(p, "exit");
    assert.equal(code, 130);
    for (let i = 0; i < 100 && alive(pids.last); i++) await new Promise((r) => setTimeout(r, 20));
    assert.ok(!alive(pids.last), "the second signal ends the last groups too");
  } finally {
    p.kill("SIGKILL");
    for (const pid of [pids?.group, pids?.last]) if (pid && alive(pid)) process.kill(pid, "SIGKILL");
  }
});
