// LangChain's Daytona sandbox for deepagents (`@langchain/daytona`, on the Daytona SDK 0.143 it
// pins), with its defaults: create with initial files, execute, uploads and downloads, the
// inherited read, write, edit, ls, grep and glob, stop and start, and deleteAll by label.
import assert from "node:assert/strict";
import { DaytonaSandbox } from "@langchain/daytona";
import { step } from "./lib.mjs";

const sb = await step("create", async () => await DaytonaSandbox.create({ labels: { purpose: "frameworks-test" }, initialFiles: { "/home/daytona/init.txt": "initial\n" } }));
await step("execute", async () => {
  const r = await sb.execute("echo hi; cat /home/daytona/init.txt; exit 4");
  assert.deepEqual([r.output, r.exitCode], ["hi\ninitial\n", 4]);
  return r;
});
await step("upload-download", async () => {
  const up = await sb.uploadFiles([["/home/daytona/x/a.txt", new TextEncoder().encode("A\n")]]);
  assert.deepEqual(up, [{ path: "/home/daytona/x/a.txt", error: null }]);
  const down = await sb.downloadFiles(["/home/daytona/x/a.txt", "/home/daytona/missing"]);
  assert.equal(new TextDecoder().decode(down[0].content), "A\n");
  assert.equal(down[1].error, "file_not_found");
  return down.map((d) => d.error);
});
await step("read-write-edit", async () => {
  await sb.write("/home/daytona/w.py", "print(1)\n");
  assert.match((await sb.read("/home/daytona/w.py")).content, /print\(1\)/);
  assert.equal((await sb.edit("/home/daytona/w.py", "print(1)", "print(2)")).occurrences, 1);
  return (await sb.execute("python3 /home/daytona/w.py")).output;
});
await step("ls-grep-glob", async () => {
  const ls = await sb.ls("/home/daytona");
  assert.ok(
    ls.files.some((f) => f.path === "/home/daytona/w.py"),
    JSON.stringify(ls),
  );
  const grep = await sb.grep("print", "/home/daytona");
  assert.deepEqual(
    grep.matches.map((m) => [m.path, m.text]),
    [["/home/daytona/w.py", "print(2)"]],
  );
  const glob = await sb.glob("*.py", "/home/daytona");
  assert.deepEqual(
    glob.files.map((f) => f.path),
    ["w.py"],
  );
  return glob;
});
await step("stop-start", async () => {
  await sb.stop();
  await sb.start();
  const r = await sb.execute("cat /home/daytona/w.py");
  assert.equal(r.output, "print(2)\n");
  return r.output;
});
await step("deleteAll", async () => {
  const n = await DaytonaSandbox.deleteAll({ purpose: "frameworks-test" });
  assert.equal(n, 1);
  return n;
});
console.log("done");
