// Secrets reach the guest's processes (environment, tmpfs files) and nothing else: not the
// sandbox's disk, its logs, the store, events, or a snapshot.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/compose/app.js";
import type { Forge, Sandbox } from "../../src/index.js";
import { openForge } from "../helpers.js";

/** The server's own secret values (FORGEVM_SECRET_<NAME> for `forgevm serve`). */
const hostSecrets: Record<string, string> = {};
let shared: Promise<Forge> | null = null;
const testForge = () => (shared ??= openForge({ hostSecrets }));

let app: FastifyInstance | null = null;
after(async () => {
  await app?.close();
});

/** Every file under `dir` (recursively) whose bytes contain `needle`. */
async function filesContaining(dir: string, needle: string): Promise<string[]> {
  const hits: string[] = [];
  const walk = async (d: string) => {
    for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else if (e.isFile()) {
        const st = await stat(p).catch(() => null);
        if (!st || st.size > 4 * 1024 * 1024 * 1024) continue;
        if ((await readFile(p).catch(() => Buffer.alloc(0))).includes(needle)) hits.push(p);
      }
    }
  };
  await walk(dir);
  return hits;
}

describe("secrets", () => {
  it("reach each exec's environment and a root-only tmpfs file, and nowhere on the host's disk", async () => {
    const forge = await testForge();
    const value = `s3cret-${randomBytes(12).toString("hex")}`;
    const marker = `marker-${randomBytes(12).toString("hex")}`;
    const sb: Sandbox = await forge.sandboxes.spawn({ secrets: { API_TOKEN: value } });
    try {
      assert.equal((await sb.exec('printf %s "$API_TOKEN"')).stdout, value);
      assert.equal((await sb.exec("cat /run/secrets/API_TOKEN")).stdout, value);
      assert.equal((await sb.exec("stat -c '%a %U' /run/secrets/API_TOKEN; stat -f -c %T /run/secrets")).stdout, "400 root\ntmpfs\n");
      // a non-root user gets the environment but not the file
      const nobody = await sb.exec("cat /run/secrets/API_TOKEN", { user: "nobody" });
      assert.notEqual(nobody.exitCode, 0);
      // Control for the scan below: bytes the guest writes to its disk do show up on the host.
      await sb.exec(`echo ${marker} > /root/marker.txt; sync`);
      await sb.exec("sync; echo 3 > /proc/sys/vm/drop_caches");
      const markerHits = await filesContaining(sb.vm.info.dir, marker);
      assert.ok(
        markerHits.some((p) => p.endsWith(".qcow2")),
        `the scan sees the guest's disk writes (${markerHits.join(", ")})`,
      );
      assert.deepEqual(await filesContaining(sb.vm.info.dir, value), [], "not in the overlay, console log or QEMU log");
      assert.deepEqual(await filesContaining(forge.paths.dataDir, value), [], "not in the store, events, logs or snapshots");
      // snapshots and forks would write its RAM (holding the secret) to disk: refused
      await assert.rejects(forge.snapshots.take(sb.id), /holds secrets/);
      await assert.rejects(forge.snapshots.fork(sb.id), /holds secrets/);
    } finally {
      await sb.destroy();
    }
    assert.deepEqual(await filesContaining(forge.paths.dataDir, value), [], "nor after it is destroyed");
  });

  it("come from a template's declaration, with the value from the request or the server's environment", async () => {
    const forge = await testForge();
    app = await buildApp({ forge, version: "test" });
    const api = async (method: string, url: string, body?: unknown) => {
      const r = await app!.inject({ method: method as "POST", url: `/api/v1${url}`, payload: body as object });
      return { status: r.statusCode, body: r.json() };
    };
    const made = await api("POST", "/templates", {
      name: "with-secrets",
      secrets: [
        { name: "DB_PASS", inject_at: "env" },
        { name: "CERT", inject_at: "file" },
      ],
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.deepEqual(made.body.secrets, [
      { name: "DB_PASS", inject_at: "env" },
      { name: "CERT", inject_at: "file" },
    ]);
    try {
      const missing = await api("POST", "/templates/with-secrets/spawn", {});
      assert.equal(missing.status, 400);
      assert.match(missing.body.message, /needs DB_PASS/);
      hostSecrets.CERT = "cert-from-server-env";
      const r = await api("POST", "/templates/with-secrets/spawn", { secrets: { DB_PASS: "pw-from-request" } });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const sb = forge.sandboxes.running(r.body.id);
      assert.equal((await sb.exec('printf \'%s|%s\' "$DB_PASS" "$CERT"')).stdout, "pw-from-request|");
      assert.equal((await sb.exec("cat /run/secrets/CERT; echo; ls /run/secrets")).stdout, "cert-from-server-env\nCERT\n");
      await sb.destroy();
    } finally {
      delete hostSecrets.CERT;
      await api("DELETE", "/templates/with-secrets");
    }
    for (const [body, re] of [
      [{ secrets: { "BAD-NAME": "x" } }, /secrets: "BAD-NAME" is not a valid name/],
      [{ secrets: { OK: 5 } }, /secrets/],
    ] as const) {
      const r = await api("POST", "/sandboxes", body);
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.match(r.body.message, re);
    }
    const badTpl = await api("POST", "/templates", { name: "bad-secret", secrets: [{ name: "1X" }] });
    assert.equal(badTpl.status, 400);
    assert.match(badTpl.body.message, /"1X" is not a valid name/);
  });
});
