// One definition per wire message: the route schemas are the definition; the committed OpenAPI
// document, the error table, the TypeScript SDK's types and the Python SDK's models are copies,
// and each of these tests fails when a copy drifts.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { ERROR_CLASSES as TS_ERROR_CLASSES } from "forgevm";
import { ERROR_CODES } from "../../src/http/errors.js";
import { ERRORS_FILE, errorsDoc, OPENAPI_FILE, openapiDocument } from "../../scripts/contract-docs.js";
import { PY_WIRE_FILE, pyWire, TS_WIRE_FILE, tsWire } from "../../scripts/sdk-types.js";
import { tsInterfaces } from "../ts-interfaces.js";

const repo = fileURLToPath(new URL("../../..", import.meta.url));
type Schema = { $ref?: string; properties?: Record<string, Schema>; items?: Schema; type?: string };
type Doc = { paths: Record<string, Record<string, any>>; components: { schemas: Record<string, Schema> } };

let doc: Doc;
async function current(): Promise<Doc> {
  doc ??= (await openapiDocument()) as Doc;
  return doc;
}

function resolve(d: Doc, s: Schema): Schema {
  return s.$ref ? d.components.schemas[s.$ref.split("/").pop()!] : s;
}

/** The property names of a route's request body or response. */
function props(d: Doc, method: string, path: string, part: "body" | number): string[] {
  const op = d.paths[`/api/v1${path}`]?.[method];
  assert.ok(op, `${method.toUpperCase()} ${path} is in the document`);
  const content = part === "body" ? op.requestBody?.content : op.responses?.[part]?.content;
  let s = resolve(d, content["application/json"].schema);
  if (s.type === "array" && s.items) s = resolve(d, s.items);
  return Object.keys(s.properties ?? {}).sort();
}

/** Field names of the Python SDK's models and the keyword arguments of its spawn. */
function pythonModels(): Record<string, string[]> {
  const script = `
import dataclasses, inspect, json, forgevm
from forgevm import models
out = {}
for name in ["SandboxInfo", "ExecResult", "FileInfo", "Execution", "CodeContext", "CodeError"]:
    out[name] = sorted(f.name for f in dataclasses.fields(getattr(models, name)))
for name in ["Template", "SnapshotInfo", "ImageInfo", "NetworkInfo", "PortMapping"]:
    out[name] = sorted(getattr(models, name).__annotations__)
out["spawn"] = sorted(p for p in inspect.signature(forgevm.Client.spawn).parameters if p != "self")
out["errors"] = sorted(forgevm.ERROR_CLASSES)
print(json.dumps(out))`;
  return JSON.parse(execFileSync("python3", ["-c", script], { env: { ...process.env, PYTHONPATH: join(repo, "sdk", "python"), PYTHONDONTWRITEBYTECODE: "1" } }).toString());
}

describe("the OpenAPI document and the error table", () => {
  it("docs/openapi.json is what the route schemas generate (npm run docs rewrites it)", async () => {
    const committed = JSON.parse(readFileSync(OPENAPI_FILE, "utf8"));
    assert.deepEqual(committed, JSON.parse(JSON.stringify(await current())), "docs/openapi.json has drifted from the schemas: run npm run docs");
  });

  it("documents every route but the WebSocket upgrades (docs/rest-api.md), a desktop's relayed live view (docs/desktop.md), the document itself, the console's files, E2B's (docs/e2b.md), Daytona's (docs/daytona.md) and the Custom HTTP protocol's (docs/custom-http.md)", async () => {
    const { buildApp } = await import("../../src/compose/app.js");
    const { routesOf } = await import("../../src/server/app.js");
    const app = await buildApp({ forge: {} as never, version: "test" });
    await app.ready();
    const d = await current();
    // E2B's routes follow E2B's contract, not ours: docs/e2b.md lists them.
    const e2b = (url: string) =>
      url.startsWith("/_e2b/") ||
      url.startsWith("/sandboxes") ||
      url.startsWith("/v2/sandboxes") ||
      ["/secrets", "/snapshots", "/templates/", "/teams", "/volumes", "/volumecontent/", "/v2/templates/", "/v3/templates"].some((p) => url.startsWith(p)) ||
      // Daytona's follow Daytona's (docs/daytona.md), the Custom HTTP protocol's its own (docs/custom-http.md).
      url.startsWith("/daytona/") ||
      url.startsWith("/custom-http/");
    const hidden = routesOf(app)
      .filter((r) => !r.documented && !e2b(r.url))
      .map((r) => `${r.method} ${r.url}`);
    assert.deepEqual(hidden.sort(), [
      "GET /",
      "GET /api/v1/openapi.json",
      "GET /api/v1/sandboxes/:id/desktop/stream/:mode/:token/*",
      "GET /api/v1/sandboxes/:id/exec/ws",
      "GET /api/v1/sandboxes/:id/tcp/:port",
      "GET /assets/:file",
    ]);
    for (const r of routesOf(app).filter((x) => x.documented)) {
      const path = r.url.replace(/:([a-z_]+)/g, "{$1}");
      assert.ok(d.paths[path]?.[r.method.toLowerCase()], `${r.method} ${path} is in the OpenAPI document`);
    }
    await app.close();
  });

  it("docs/errors.md lists exactly core's codes with their statuses (npm run docs rewrites it)", () => {
    const text = readFileSync(ERRORS_FILE, "utf8");
    assert.equal(text, errorsDoc(text), "the table in docs/errors.md has drifted from src/http/errors.ts: run npm run docs");
  });
});

describe("the SDKs' copies", () => {
  // The SDK's own types and the generated ones, as one table.
  const types = new Map([...tsInterfaces(join(repo, "sdk", "typescript", "src", "types.ts")), ...tsInterfaces(TS_WIRE_FILE)]);
  const same = (what: string, got: string[] | undefined, want: string[]) => assert.deepEqual(got, want, `${what} drifted from the server's schema`);

  it("the SDKs' wire types are what npm run docs writes from the schemas, byte for byte", async () => {
    const d = await current();
    assert.equal(readFileSync(TS_WIRE_FILE, "utf8"), tsWire(d), "sdk/typescript/src/wire.ts has drifted from the schemas: run npm run docs");
    assert.equal(readFileSync(PY_WIRE_FILE, "utf8"), pyWire(d), "sdk/python/forgevm/wire.py has drifted from the schemas: run npm run docs");
    // Every generated interface has the fields of the schema it came from; the SDK's own file defines none of them again.
    const own = tsInterfaces(join(repo, "sdk", "typescript", "src", "types.ts"));
    const generated = tsInterfaces(TS_WIRE_FILE);
    assert.ok(generated.size >= 35, `wire.ts has the wire types (${generated.size})`);
    assert.deepEqual(
      [...own.keys()].filter((n) => generated.has(n)),
      [],
      "types.ts defines a wire type again",
    );
    assert.deepEqual(generated.get("SandboxInfo"), props(d, "get", "/sandboxes/{id}", 200));
  });

  it("the TypeScript SDK's response types have the fields the server sends", async () => {
    const d = await current();
    same("SandboxInfo", types.get("SandboxInfo"), props(d, "get", "/sandboxes/{id}", 200));
    same("ExecResult", types.get("ExecResult"), props(d, "post", "/sandboxes/{id}/exec", 200));
    same("FileInfo", types.get("FileInfo"), props(d, "get", "/sandboxes/{id}/files/stat", 200));
    same("SnapshotInfo", types.get("SnapshotInfo"), props(d, "get", "/snapshots/{id}", 200));
    same("Template", types.get("Template"), props(d, "get", "/templates/{name}", 200));
    same("ImageInfo", types.get("ImageInfo"), props(d, "get", "/images", 200));
    same("GuestProcess", types.get("GuestProcess"), props(d, "get", "/sandboxes/{id}/top", 200));
    same("PullJob", types.get("PullJob"), props(d, "get", "/images/pulls/{id}", 200));
    same("NetworkInfo", types.get("NetworkInfo"), props(d, "get", "/sandboxes/{id}/network", 200));
    same("PortMapping", types.get("PortMapping"), props(d, "post", "/sandboxes/{id}/ports", 201));
    same("EgressEntry", types.get("EgressEntry"), props(d, "get", "/sandboxes/{id}/egress", 200));
    same("Execution", types.get("Execution"), props(d, "post", "/sandboxes/{id}/code", 200));
    same("CodeContext", types.get("CodeContext"), props(d, "get", "/sandboxes/{id}/code/contexts", 200));
    same("CodeResult", types.get("CodeResult"), Object.keys(d.components.schemas.CodeResult.properties ?? {}).sort());
    same("CodeError", types.get("CodeError"), Object.keys(d.components.schemas.CodeError.properties ?? {}).sort());
    same("AuditEntry", types.get("AuditEntry"), Object.keys(d.components.schemas.AuditEntry.properties ?? {}).sort());
    same("VolumeInfo", types.get("VolumeInfo"), props(d, "get", "/volumes/{name}", 200));
    same("VolumeMount", types.get("VolumeMount"), Object.keys(d.components.schemas.VolumeMount.properties ?? {}).sort());
    same("HostDirMount", types.get("HostDirMount"), Object.keys(d.components.schemas.HostDirMount.properties ?? {}).sort());
    same("CommitResult", types.get("CommitResult"), props(d, "post", "/sandboxes/{id}/commit", 201));
    same("PushResult", types.get("PushResult"), props(d, "post", "/images/{name}/push", 200));
    same("BuildJob", types.get("BuildJob"), props(d, "get", "/builds/{id}", 200));
    same("MetricSample", types.get("MetricSample"), Object.keys(d.components.schemas.MetricSample.properties ?? {}).sort());
    same("MetricHistory", types.get("MetricHistory"), props(d, "get", "/sandboxes/{id}/metrics", 200));
    same("LiveStats", types.get("LiveStats"), props(d, "get", "/stats", 200));
    same("EnvironmentSpec", types.get("EnvironmentSpec"), props(d, "get", "/environments/specs/{id}", 200));
    same("EnvironmentBuild", types.get("EnvironmentBuild"), props(d, "get", "/environments/builds/{id}", 200));
    same("EnvironmentArtifact", types.get("EnvironmentArtifact"), Object.keys(d.components.schemas.EnvArtifact.properties ?? {}).sort());
    same("EnvironmentBuildStep", types.get("EnvironmentBuildStep"), Object.keys(d.components.schemas.BuildStep.properties ?? {}).sort());
    same("EnvironmentSpawnConfig", types.get("EnvironmentSpawnConfig"), props(d, "get", "/environments/builds/{id}/spawn-config", 200));
    same("RegistryConnection", types.get("RegistryConnection"), props(d, "post", "/environments/registry-connections", 201));
  });

  it("the TypeScript SDK sends the fields the server takes", async () => {
    const d = await current();
    same("SpawnOptions", types.get("SpawnOptions"), props(d, "post", "/sandboxes", "body"));
    // ExecOptions is everything but the command (an argument) and stream (a method of its own).
    same("ExecOptions", [...types.get("ExecOptions")!, "command", "stream", "stdin_encoding"].sort(), props(d, "post", "/sandboxes/{id}/exec", "body"));
    // RunCodeOptions is everything but the code (an argument) and stream (chosen by the callbacks).
    const runCode = types.get("RunCodeOptions")!.filter((f) => !f.startsWith("on"));
    same("RunCodeOptions", [...runCode, "code", "stream"].sort(), props(d, "post", "/sandboxes/{id}/code", "body"));
    same("createCodeContext", ["cwd", "language", "user"], props(d, "post", "/sandboxes/{id}/code/contexts", "body"));
    // CommitOptions is everything but the image (an argument).
    same("CommitOptions", [...types.get("CommitOptions")!, "image"].sort(), props(d, "post", "/sandboxes/{id}/commit", "body"));
    same("EnvironmentSpecRequest", types.get("EnvironmentSpecRequest"), props(d, "post", "/environments/specs", "body"));
    same("RegistryConnectionRequest", types.get("RegistryConnectionRequest"), props(d, "post", "/environments/registry-connections", "body"));
    same("ImageChanges", types.get("ImageChanges"), Object.keys(d.components.schemas.ImageChanges.properties ?? {}).sort());
  });

  it("the Python SDK's models have the fields the server sends, and its spawn takes what the server takes", async () => {
    const d = await current();
    const py = pythonModels();
    same("SandboxInfo (Python)", py.SandboxInfo, props(d, "get", "/sandboxes/{id}", 200));
    same("ExecResult (Python)", py.ExecResult, props(d, "post", "/sandboxes/{id}/exec", 200));
    same("FileInfo (Python)", py.FileInfo, props(d, "get", "/sandboxes/{id}/files/stat", 200));
    same("Template (Python)", py.Template, props(d, "get", "/templates/{name}", 200));
    same("SnapshotInfo (Python)", py.SnapshotInfo, props(d, "get", "/snapshots/{id}", 200));
    same("ImageInfo (Python)", py.ImageInfo, props(d, "get", "/images", 200));
    same("NetworkInfo (Python)", py.NetworkInfo, props(d, "get", "/sandboxes/{id}/network", 200));
    same("Execution (Python)", py.Execution, props(d, "post", "/sandboxes/{id}/code", 200));
    same("CodeContext (Python)", py.CodeContext, props(d, "get", "/sandboxes/{id}/code/contexts", 200));
    same("CodeError (Python)", py.CodeError, Object.keys(d.components.schemas.CodeError.properties ?? {}).sort());
    same("Client.spawn (Python)", py.spawn, props(d, "post", "/sandboxes", "body"));
  });

  it("the CLI's spawn verbs send every field the API takes (start and main come from the verb: create, run -d)", async () => {
    const { spawnRequest } = await import("../../src/cli/commands/sandboxes.js");
    const d = await current();
    same("the CLI's spawn request", [...Object.keys(spawnRequest({})), "main", "start"].sort(), props(d, "post", "/sandboxes", "body"));
    const asked = spawnRequest({ label: { team: "a" }, name: "x", owner: "alice", user: "nobody" });
    assert.deepEqual([asked.metadata, asked.owner_id, asked.user], [{ team: "a", name: "x" }, "alice", "nobody"]);
  });

  it("both SDKs map exactly the server's error codes", () => {
    const codes = [...ERROR_CODES].sort();
    assert.deepEqual(Object.keys(TS_ERROR_CLASSES).sort(), codes, "TypeScript SDK ERROR_CLASSES");
    assert.deepEqual(pythonModels().errors, codes, "Python SDK ERROR_CLASSES");
  });
});
