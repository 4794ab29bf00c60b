// The Kubernetes manifests (deploy/kubernetes/) say what the code does: every FORGEVM_ variable
// they set is a config key the server reads (with the value it would get), the roles exist, the
// probes are the health route, and the secret holds what the pods read from it.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { it } from "node:test";
import { parseAllDocuments } from "yaml";
import { DEFAULT_PORT, loadConfig } from "../../src/config/config.js";

const dir = fileURLToPath(new URL("../../../deploy/kubernetes/", import.meta.url));
const docs = readdirSync(dir)
  .filter((f) => f.endsWith(".yaml"))
  .flatMap((f) => parseAllDocuments(readFileSync(join(dir, f), "utf8")).map((d) => ({ file: f, doc: d.toJSON() })));

const containers = docs.flatMap(({ file, doc }) => (doc?.spec?.template?.spec?.containers ?? []).map((c: any) => ({ file, c })));

it("sets only config keys the server reads, for the roles that exist", () => {
  assert.ok(containers.length >= 3, "node, front and postgres containers");
  const secret = docs.find(({ doc }) => doc?.kind === "Secret")?.doc;
  for (const { file, c } of containers.filter(({ c }) => c.command?.[0] === "forgevm")) {
    const env: Record<string, string> = {};
    for (const e of c.env ?? []) {
      if (!e.name.startsWith("FORGEVM_")) continue;
      if (e.valueFrom?.secretKeyRef) {
        assert.ok(secret.stringData[e.valueFrom.secretKeyRef.key], `${file}: the secret has ${e.valueFrom.secretKeyRef.key}`);
        env[e.name] = secret.stringData[e.valueFrom.secretKeyRef.key];
      } else env[e.name] = e.value ?? "from-the-pod";
    }
    const cfg = loadConfig({ env, file: "/dev/null" });
    const role = c.command[c.command.indexOf("--role") + 1];
    assert.ok(["node", "front"].includes(role), `${file}: role ${role}`);
    assert.equal(cfg.server.port, DEFAULT_PORT);
    assert.equal(cfg.server.host, "0.0.0.0");
    assert.match(cfg.cluster.database, /^postgres:\/\//, `${file}: FORGEVM_CLUSTER_DATABASE reaches cluster.database`);
    assert.ok(cfg.auth.api_key, `${file}: an API key, as a server on 0.0.0.0 needs`);
    if (role === "node") {
      assert.equal(cfg.cluster.node_id, "from-the-pod");
      assert.equal(cfg.cluster.advertise, `http://$(NODE_IP):${DEFAULT_PORT}`);
      assert.equal(cfg.data_dir, "/var/lib/forgevm");
    }
    for (const probe of ["readinessProbe", "livenessProbe"]) assert.equal(c[probe]?.httpGet?.path, "/api/v1/health", `${file}: ${probe}`);
  }
});
