// The sandbox contract: what a user gets from any provider through the API (here through the
// TypeScript SDK, as a user would): spawn, exec, streams, files, TTL, destroy and no leaks; and
// for each feature the provider does not have, a 400 that names the provider. A provider's test
// calls sandboxContract with a running server that has it enabled.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Client, ForgevmError } from "forgevm";
import { apiRequest, waitFor } from "./helpers.js";

export interface SandboxContractOptions {
  /** The server to use (already running) and the provider to name in spawns. */
  server(): { url: string };
  provider: string;
  /** Features it refuses: each must be refused by name. */
  refuses: ("fork" | "snapshot" | "stop" | "volumes" | "commit")[];
}

export function sandboxContract(o: SandboxContractOptions): void {
  const client = () => new Client({ baseUrl: o.server().url, timeout: 60_000 });
  const spawn = (extra: Record<string, unknown> = {}) => client().spawn({ provider: o.provider, ttl: "5m", ...extra });

  describe(`sandbox contract: ${o.provider}`, () => {
    it("spawns on the provider asked for, execs with env, workdir and stdin, and streams output", async () => {
      const sb = await spawn();
      try {
        assert.equal(sb.info.provider, o.provider);
        assert.equal(sb.info.state, "running");
        const r = await sb.exec("cd /tmp && echo $GREETING $(pwd) && cat && exit 3", { env: { GREETING: "hi" }, stdin: "from stdin\n" });
        assert.deepEqual([r.exit_code, r.stdout], [3, "hi /tmp\nfrom stdin\n"]);
        const chunks: string[] = [];
        const stream = sb.execStream("for i in 1 2 3; do echo line$i; sleep 0.2; done; echo oops >&2");
        for await (const c of stream) if (c.stream === "stdout" || c.stream === "stderr") chunks.push(`${c.stream}:${c.data}`);
        assert.equal(stream.exitCode, 0);
        assert.equal(
          chunks
            .filter((c) => c.startsWith("stdout"))
            .join("")
            .replace(/stdout:/g, ""),
          "line1\nline2\nline3\n",
        );
        assert.ok(
          chunks.some((c) => c === "stderr:oops\n"),
          chunks.join("|"),
        );
      } finally {
        await sb.destroy();
      }
    });

    it("moves files in and out: text, a megabyte of bytes, listings, deletes", async () => {
      const sb = await spawn();
      try {
        await sb.writeFile("/work/a.txt", "hello");
        const bytes = new Uint8Array(1024 * 1024).map((_, i) => (i * 7) % 256);
        await sb.writeFile("/work/blob.bin", bytes);
        assert.equal(await sb.readFile("/work/a.txt"), "hello");
        assert.deepEqual(Buffer.from((await sb.readFile("/work/blob.bin", { binary: true })) as Uint8Array), Buffer.from(bytes));
        const names = (await sb.listFiles("/work")).map((f) => f.name).sort();
        assert.deepEqual(names, ["a.txt", "blob.bin"]);
        await sb.deleteFile("/work/a.txt");
        assert.deepEqual(
          (await sb.listFiles("/work")).map((f) => f.name),
          ["blob.bin"],
        );
        assert.equal((await sb.exec("sha256sum /work/blob.bin | cut -c1-16")).stdout.length, 17);
      } finally {
        await sb.destroy();
      }
    });

    it("ends at its TTL, and a destroyed sandbox leaves nothing running on the provider", async () => {
      const c = client();
      const sb = await spawn({ ttl: "3s" });
      await waitFor(async () => (await c.get(sb.id).catch((e) => e)) instanceof ForgevmError, 30_000, "the sandbox to expire");
      const other = await spawn();
      await other.destroy();
      const p = await c.provider(o.provider);
      assert.equal(p.sandbox_count, 0, "no sandbox left on the provider");
    });

    for (const feature of o.refuses) {
      it(`refuses ${feature} by naming the provider`, async () => {
        const c = client();
        if (feature === "volumes") {
          const err = await c.spawn({ provider: o.provider, volumes: ["data:/data"] } as never).catch((e) => e);
          assert.ok(err instanceof ForgevmError && err.statusCode === 400, String(err));
          assert.match(err.message, new RegExp(`provider ${o.provider} cannot attach volumes`));
          return;
        }
        const sb = await spawn();
        try {
          const attempt = {
            fork: () => sb.fork(),
            snapshot: () => sb.snapshot(),
            stop: async () => {
              const r = await apiRequest(o.server().url, "POST", `/sandboxes/${sb.id}/stop`, {});
              if (r.status !== 200) throw new ForgevmError(r.body.message, r.body.code, r.status);
            },
            commit: () => c.commit(sb.id, "contract/refused:1"),
          }[feature];
          const err = await attempt().then(
            () => null,
            (e) => e,
          );
          assert.ok(err instanceof ForgevmError && err.statusCode === 400, String(err));
          assert.match(err.message, new RegExp(`provider ${o.provider} cannot`));
          assert.equal((await sb.exec("echo still running")).stdout, "still running\n");
        } finally {
          await sb.destroy();
        }
      });
    }
  });
}
