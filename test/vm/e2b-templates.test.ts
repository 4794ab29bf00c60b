// E2B template builds through the unmodified e2b SDK (2.51): the Template builder's steps, file
// uploads by hash, build logs and status, Template.exists, Template.build and buildInBackground,
// and sandboxes of the built template. Build steps here need no network (the default template
// of Mastra's E2B provider, which apt-installs from Debian's archive, was tried by hand: see
// docs/e2b.md).
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { BuildError, Sandbox, Template } from "e2b";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import type { Forge } from "../../src/index.js";
import { e2bEnv } from "../e2b-env.js";
import { assertNoVmLeft, openForge } from "../helpers.js";

const API_KEY = "e2b_0123456789abcdef";
let forge: Forge;
let app: FastifyInstance;
let base: string;
let ctx: string;

before(async () => {
  forge = await openForge({ reapIntervalMs: 200 });
  app = await buildApp({ forge, version: "test", apiKey: API_KEY });
  base = await app.listen({ host: "127.0.0.1", port: 0 });
  e2bEnv(base, API_KEY);
  ctx = await mkdtemp(join(tmpdir(), "forgevm-e2b-template-"));
  await mkdir(join(ctx, "app"));
  await writeFile(join(ctx, "app", "hello.txt"), "copied from the context\n");
});

after(async () => {
  await app?.close();
  await forge?.close();
  if (forge) await assertNoVmLeft(forge);
  if (ctx) await rm(ctx, { recursive: true, force: true });
});

const api = (path: string, init: RequestInit = {}) => fetch(`${base}${path}`, { ...init, headers: { "x-api-key": API_KEY, "content-type": "application/json", ...init.headers } });

describe("Template.build", () => {
  it("builds the steps as E2B does (as `user` in /home/user unless a step says root), uploads COPY sources by hash, and the template spawns", async () => {
    assert.equal(await Template.exists("tpl-test"), false);
    const template = Template({ fileContextPath: ctx })
      .fromTemplate("base")
      .setEnvs({ GREETING: "hi there" })
      .runCmd("id -un > /home/user/step-user.txt")
      .runCmd(["mkdir -p /opt/app", "id -un > /opt/app/root-step.txt"], { user: "root" })
      .copy("app/hello.txt", "/home/user/app/")
      .setWorkdir("/home/user/app");
    const logs: string[] = [];
    const built = await Template.build(template, "tpl-test", { onBuildLogs: (l) => logs.push(l.message) });
    assert.equal(built.templateId, "tpl-test");
    assert.ok(
      logs.some((l) => /Step \d+\/\d+ .*COPY/.test(l)),
      logs.join("\n"),
    );
    assert.ok(logs.some((l) => /ready/.test(l)));
    assert.equal(await Template.exists("tpl-test"), true);

    const sbx = await Sandbox.create("tpl-test");
    try {
      const r = await sbx.commands.run("cat /home/user/step-user.txt /opt/app/root-step.txt hello.txt; echo $GREETING; pwd; stat -c %U hello.txt");
      assert.equal(r.stdout, "user\nroot\ncopied from the context\nhi there\n/home/user/app\nuser\n");
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).templateId, "tpl-test");
    } finally {
      await sbx.kill();
    }

    // A second build of the same files uploads nothing: the server has them by hash.
    const again: string[] = [];
    await Template.build(template, "tpl-test:v2", { onBuildLogs: (l) => again.push(l.message) });
    assert.ok(
      again.some((l) => /Skipping upload of 'app\/hello.txt', already cached/.test(l)),
      again.join("\n"),
    );
    assert.equal(await Template.exists("tpl-test:v2"), true);
  });

  it("buildInBackground answers at once; the status route gives the log from an offset and the end", async () => {
    const t = Template().fromTemplate("tpl-test").runCmd("echo layered > /home/user/layered.txt");
    const info = await Template.buildInBackground(t, "tpl-bg");
    let status = await Template.getBuildStatus(info);
    for (let i = 0; i < 600 && (status.status === "building" || status.status === "waiting"); i++) {
      await new Promise((r) => setTimeout(r, 200));
      status = await Template.getBuildStatus(info);
    }
    assert.equal(status.status, "ready", JSON.stringify(status.reason));
    const all = await Template.getBuildStatus(info, { logsOffset: 0 });
    const tail = await Template.getBuildStatus(info, { logsOffset: all.logEntries.length - 1 });
    assert.equal(tail.logEntries.length, 1);
    const sbx = await Sandbox.create("tpl-bg");
    try {
      assert.equal((await sbx.commands.run("cat /home/user/layered.txt hello.txt; pwd")).stdout, "layered\ncopied from the context\n/home/user/app\n");
    } finally {
      await sbx.kill();
    }
  });

  it("a failing step is the SDK's BuildError with the command's output; bad templates are 400s that name the field", async () => {
    const failing = Template().fromTemplate("base").runCmd("echo before-failing; exit 7");
    await assert.rejects(Template.build(failing, "tpl-fails"), (e: unknown) => e instanceof BuildError && /exit|7/.test((e as Error).message));
    assert.equal(await Template.exists("tpl-fails"), false);

    const start = (await (await api("/v3/templates", { method: "POST", body: JSON.stringify({ name: "tpl-bad" }) })).json()) as { buildID: string };
    const trigger = (body: unknown) => api(`/v2/templates/tpl-bad/builds/${start.buildID}`, { method: "POST", body: JSON.stringify(body) });
    const cases: [unknown, RegExp][] = [
      [{ fromTemplate: "base", steps: [{ type: "ARG", args: ["x"] }] }, /steps\[0\] \(ARG\): .*not supported/],
      [{ fromTemplate: "nope-nope" }, /fromTemplate: template "nope-nope" not found/],
      [{ fromTemplate: "base", steps: [{ type: "COPY", args: ["a", "/b"], filesHash: "0".repeat(64) }] }, /never uploaded/],
      [{ fromTemplate: "base", steps: [{ type: "COPY", args: ["../etc", "/b"], filesHash: "0".repeat(64) }] }, /leaves the build context/],
      [{ fromTemplate: "base", steps: [{ type: "ENV", args: ["A"] }] }, /name and value pairs/],
      [{ fromImage: "x", fromTemplate: "base" }, /exactly one of fromImage and fromTemplate/],
    ];
    for (const [body, re] of cases) {
      const r = await trigger(body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(((await r.json()) as { message: string }).message, re);
    }
    for (const name of ["Upper", "a/b", "x:y:z", ""]) {
      const r = await api("/v3/templates", { method: "POST", body: JSON.stringify({ name }) });
      assert.equal(r.status, 400, name);
    }
    assert.equal((await api("/templates/tpl-bad/builds/not-a-build/status")).status, 404);
    // An upload URL carries its own token: a wrong one is refused before the body is read.
    const link = (await (await api(`/templates/tpl-bad/files/${"a".repeat(64)}`)).json()) as { present: boolean; url: string };
    assert.equal(link.present, false);
    const forged = link.url.replace(/token=[^&]+/, "token=forged");
    assert.equal((await fetch(forged, { method: "PUT", body: "x" })).status, 401);
    assert.equal((await fetch(link.url.replace(/token=[^&]+/, ""), { method: "PUT", body: "x" })).status, 401);
  });
});
