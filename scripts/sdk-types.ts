// The SDKs' wire types, written from the OpenAPI document (itself made from the route schemas):
// sdk/typescript/src/wire.ts (interfaces) and sdk/python/forgevm/wire.py (TypedDicts). Each SDK
// type names where its shape comes from: a component schema, a route's response or a route's
// body. `npm run docs` writes both files; test/unit/contract.test.ts fails when a committed copy is
// not what this writes.
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const repo = fileURLToPath(new URL("../../", import.meta.url));
export const TS_WIRE_FILE = join(repo, "sdk", "typescript", "src", "wire.ts");
export const PY_WIRE_FILE = join(repo, "sdk", "python", "forgevm", "wire.py");

/** JSON Schema as the OpenAPI document holds it. */
type Schema = any;
type Doc = any;

/** Where an SDK type's shape comes from. */
type Source = { schema: string } | { response: [method: string, path: string, status: number] } | { body: [method: string, path: string] };

/** Every generated type: its SDK name, where it comes from, and its doc line. */
const TYPES: [name: string, from: Source, doc: string][] = [
  ["SandboxInfo", { schema: "Sandbox" }, "A sandbox as the server describes it."],
  ["SpawnOptions", { body: ["post", "/sandboxes"] }, "What a spawn (or create) may ask for."],
  [
    "IdleSpec",
    { schema: "IdleSpec" },
    'What a sandbox does once idle: after `after` ("30s") with nothing in flight, "pause" (resumed by the next call, the default), "stop" or "none".',
  ],
  ["MainInfo", { schema: "MainInfo" }, "A sandbox's main process: command, restart policy, and how its last run went."],
  ["NetworkInfo", { schema: "Network" }, "A sandbox's network: mode, egress allowlist, published ports."],
  ["PortMapping", { schema: "PortMapping" }, "A published port: host address and port → guest port."],
  ["VolumeMount", { schema: "VolumeMount" }, "A named volume mounted in a sandbox."],
  ["HostDirMount", { schema: "HostDirMount" }, "A host directory mounted in a sandbox."],
  ["BalloonInfo", { response: ["get", "/sandboxes/{id}/balloon", 200] }, "A sandbox's balloon: the memory it was given, what the balloon leaves it, and what its guest counts."],
  ["DesktopScreen", { schema: "DesktopScreen" }, "A desktop's screen: its size and DPI (a spawn's `screen`, or `desktop.setScreen`)."],
  ["DesktopProcessState", { schema: "DesktopProcessState" }, "One of a desktop's processes: whether it runs, and its pid."],
  ["DesktopInfo", { response: ["get", "/sandboxes/{id}/desktop", 200] }, "A sandbox's desktop: whether it runs, its screen's size, and its processes."],
  ["DesktopWindow", { response: ["get", "/sandboxes/{id}/desktop/windows", 200] }, "A visible window of a desktop, with its place, size and whether it has the focus."],
  [
    "DesktopStream",
    { response: ["post", "/sandboxes/{id}/desktop/stream", 200] },
    "A desktop's live view: noVNC's page through the server, a URL that works on its own in a browser until it expires.",
  ],
  [
    "DesktopClickOptions",
    { body: ["post", "/sandboxes/{id}/desktop/mouse/click"] },
    "What a click sends: where (or where the pointer is), the button, how many clicks, and keys held.",
  ],
  ["SshAccess", { response: ["post", "/sandboxes/{id}/ssh", 200] }, "What an ssh client pins and logs in as, once a sandbox's sshd is ready for its keys."],
  ["EgressEntry", { schema: "EgressEntry" }, "One egress decision of the sandbox's proxy."],
  ["NetworkUpdate", { body: ["put", "/sandboxes/{id}/network"] }, "What `updateNetwork` sends: a field left out keeps its value, null clears it."],
  ["EgressRule", { schema: "EgressRule" }, "The headers the egress proxy adds to requests for one destination."],
  ["EgressRules", { schema: "EgressRules" }, "Headers the egress proxy adds per destination, secrets named by placeholder ({{NAME}}); the values stay on the host."],
  ["SecretInfo", { schema: "SecretInfo" }, "A secret kept on the server: never its value."],
  ["SecretInput", { body: ["post", "/secrets"] }, "What `secrets.create` sends."],
  ["SecretUpdate", { body: ["put", "/secrets/{name}"] }, "What `secrets.update` sends: a new value, and optionally a new description and metadata."],
  ["GuestProcess", { schema: "GuestProcess" }, "A process running in a sandbox."],
  ["ProcessInfo", { schema: "ProcessInfo" }, "A process the sandbox keeps track of, to follow again by pid."],
  ["ExecResult", { response: ["post", "/sandboxes/{id}/exec", 200] }, "What a command did: a non-zero exit code is a result, not an error."],
  ["FileInfo", { schema: "FileInfo" }, "A file or directory in a sandbox."],
  ["ArchiveResult", { response: ["put", "/sandboxes/{id}/archive", 200] }, "What an archive upload wrote."],
  ["SnapshotInfo", { schema: "Snapshot" }, "A snapshot: a sandbox's memory, devices and disk at one moment."],
  ["Template", { schema: "Template" }, "A template as the server stores it; `vcpus`/`cpu_cores` and `ttl`/`ttl_seconds` are the same fields by two names."],
  ["TemplateInput", { body: ["post", "/templates"] }, "What `templates.create` sends: a name and any of a template's fields."],
  ["TemplateUpdate", { body: ["put", "/templates/{name}"] }, "What `templates.update` sends: the template's fields (its name comes from the path)."],
  ["ImageInfo", { schema: "Image" }, "A local image on the server."],
  ["ImageChanges", { schema: "ImageChanges" }, "What a commit changes in the new image's config (Docker's commit --change subset)."],
  ["CommitResult", { response: ["post", "/sandboxes/{id}/commit", 201] }, "A commit's new image and what it took."],
  ["PushResult", { response: ["post", "/images/{name}/push", 200] }, "Where a push put an image, and what it uploaded."],
  ["PullJob", { response: ["get", "/images/pulls/{id}", 200] }, "An image pull running on the server (or finished within the hour)."],
  ["BuildJob", { response: ["get", "/builds/{id}", 200] }, "A build running on the server (or finished within the hour)."],
  ["VolumeInfo", { schema: "Volume" }, "A named volume: data that outlives sandboxes."],
  ["MetricSample", { schema: "MetricSample" }, "One metric sample (or bucket average): host side from the VMM, guest side from the agent; null where not sampled."],
  ["MetricHistory", { response: ["get", "/sandboxes/{id}/metrics", 200] }, "A series of samples: `since` onwards in buckets of `step_ms`."],
  ["LiveStats", { response: ["get", "/stats", 200] }, "The newest sample of the host and of every running sandbox."],
  ["HealthInfo", { response: ["get", "/health", 200] }, "The server's health, version and storage."],
  ["AuditEntry", { schema: "AuditEntry" }, "One tool call an agent made through MCP (arguments with secrets and contents redacted)."],
  ["CodeResult", { schema: "CodeResult" }, "A result of running code: the value of its last expression (is_main_result), or a figure it drew, in every format it has."],
  ["CodeError", { schema: "CodeError" }, "The exception code raised."],
  ["Execution", { response: ["post", "/sandboxes/{id}/code", 200] }, "What running code produced."],
  ["CodeContext", { schema: "CodeContext" }, "A stateful code context: its variables, imports and working directory persist between runs."],
  ["EnvironmentSpec", { schema: "EnvSpec" }, "An environment: a base image plus the Debian and Python packages a project needs."],
  ["EnvironmentSpecRequest", { body: ["post", "/environments/specs"] }, "What `environments.createSpec` sends."],
  ["EnvironmentBuildStep", { schema: "BuildStep" }, "One builder step of an environment build (an instruction of its generated Dockerfile)."],
  ["EnvironmentArtifact", { schema: "EnvArtifact" }, "Where a build's image went: the local store or a registry connection."],
  ["EnvironmentBuild", { schema: "EnvBuild" }, "A build of an environment: queued → building → ready | failed | canceled."],
  ["EnvironmentSpawnConfig", { response: ["get", "/environments/builds/{id}/spawn-config", 200] }, "What to spawn from a build."],
  ["RegistryConnection", { schema: "RegistryConnection" }, "A registry login builds push with; the secret is never shown."],
  [
    "RegistryConnectionRequest",
    { body: ["post", "/environments/registry-connections"] },
    'What `environments.putRegistryConnection` sends: `secret_ref` is the token, or "secret:NAME" for the operator\'s.',
  ],
];

/**
 * Types the Python SDK defines as dataclasses of its own in models.py (it fills them in as output
 * streams, and gives them methods), so wire.py does not define them a second time;
 * test/unit/contract.test.ts checks their fields against the schemas instead.
 */
const PY_DATACLASSES = new Set(["SandboxInfo", "ExecResult", "FileInfo", "CodeError", "Execution", "CodeContext"]);

const REF = "#/components/schemas/";

/** The top-level schema of an SDK type, arrays unwrapped (a list route's items). */
function sourceSchema(d: Doc, from: Source): Schema {
  let s: Schema;
  if ("schema" in from) s = d.components.schemas[from.schema];
  else {
    const [method, path] = "response" in from ? from.response : from.body;
    const op = d.paths[`/api/v1${path}`]?.[method];
    if (!op) throw new Error(`${method.toUpperCase()} ${path} is not in the OpenAPI document`);
    const content = "response" in from ? op.responses?.[from.response[2]]?.content : op.requestBody?.content;
    s = content?.["application/json"]?.schema;
  }
  if (!s) throw new Error(`no schema for ${JSON.stringify(from)}`);
  if (s.$ref) s = d.components.schemas[s.$ref.slice(REF.length)];
  if (s.type === "array" && s.items) s = s.items.$ref ? d.components.schemas[s.items.$ref.slice(REF.length)] : s.items;
  return s;
}

/** The SDK name each component schema goes by (a component with no SDK type of its own keeps its name). */
function refNames(): Map<string, string> {
  const m = new Map<string, string>();
  for (const [name, from] of TYPES) if ("schema" in from) m.set(from.schema, name);
  return m;
}

/** How a schema is written down, to find a component inlined in a route's schema. */
const shapeKey = (s: Schema) => JSON.stringify({ ...s, $id: undefined, title: undefined });

/** Names the component schemas by their shape, for schemas a route inlines instead of referring to them. */
function inlined(d: Doc, names: Map<string, string>): Map<string, string> {
  const m = new Map<string, string>();
  for (const [ref, s] of Object.entries<Schema>(d.components.schemas)) if (names.has(ref)) m.set(shapeKey(s), names.get(ref)!);
  return m;
}

/** What the writers need to name a schema: the SDK names of components, and components by shape. */
interface Names {
  refs: Map<string, string>;
  shapes: Map<string, string>;
}

/** A value's literal in both languages' unions. */
const literal = (v: unknown) => JSON.stringify(v);

/** The literal values a schema allows, when it is an enumeration (or a union of them). */
function enumValues(s: Schema): unknown[] | null {
  if (Array.isArray(s.enum)) return s.enum;
  if (s.const !== undefined) return [s.const];
  const parts = s.anyOf ?? s.oneOf;
  if (Array.isArray(parts) && parts.length && parts.every((p: Schema) => enumValues(p))) return parts.flatMap((p: Schema) => enumValues(p) as unknown[]);
  return null;
}

// ---- TypeScript

function tsType(s: Schema, names: Names, indent: string): string {
  if (!s || Object.keys(s).length === 0) return "unknown";
  if (s.$ref) {
    const ref = s.$ref.slice(REF.length);
    return names.refs.get(ref) ?? ref;
  }
  const t = names.shapes.get(shapeKey({ ...s, nullable: undefined })) ?? tsBare(s, names, indent);
  return s.nullable === true && t !== "unknown" && !t.split(" | ").includes("null") ? `${t} | null` : t;
}

function tsBare(s: Schema, names: Names, indent: string): string {
  const values = enumValues(s);
  if (values) return values.map(literal).join(" | ");
  const parts = s.anyOf ?? s.oneOf;
  if (Array.isArray(parts)) return [...new Set(parts.map((p: Schema) => tsType(p, names, indent)))].join(" | ");
  const type = Array.isArray(s.type) ? s.type : [s.type];
  if (type.length > 1) return type.map((t: string) => tsBare({ ...s, type: t }, names, indent)).join(" | ");
  switch (type[0]) {
    case "string":
      return "string";
    case "integer":
    case "number":
      return "number";
    case "boolean":
      return "boolean";
    case "null":
      return "null";
    case "array": {
      const item = tsType(s.items, names, indent);
      return /[ |]/.test(item) && !item.startsWith("{") ? `(${item})[]` : `${item}[]`;
    }
    case "object":
      if (s.properties) return tsObject(s, names, indent);
      if (s.additionalProperties && typeof s.additionalProperties === "object") return `Record<string, ${tsType(s.additionalProperties, names, indent)}>`;
      return "Record<string, unknown>";
    default:
      return "unknown";
  }
}

const docComment = (text: string | undefined, indent: string) => (text ? `${indent}/** ${text.replace(/\*\//g, "* /")} */\n` : "");

function tsFields(s: Schema, names: Names, indent: string): string {
  const required = new Set<string>(s.required ?? []);
  let out = "";
  for (const [k, v] of Object.entries<Schema>(s.properties ?? {})) {
    out += docComment(v.description, indent);
    out += `${indent}${/^[A-Za-z_$][\w$]*$/.test(k) ? k : literal(k)}${required.has(k) ? "" : "?"}: ${tsType(v, names, indent)};\n`;
  }
  if (s.additionalProperties === true) out += `${indent}[field: string]: unknown;\n`;
  return out;
}

function tsObject(s: Schema, names: Names, indent: string): string {
  const inner = `${indent}  `;
  return `{\n${tsFields(s, names, inner)}${indent}}`;
}

/** sdk/typescript/src/wire.ts as the schemas make it. */
export function tsWire(d: Doc): string {
  const refs = refNames();
  const names: Names = { refs, shapes: inlined(d, refs) };
  let out =
    "// Generated by `npm run docs` from the server's schemas (scripts/sdk-types.ts): do not edit.\n" +
    "// The wire shapes of the ForgeVM REST API, snake_case as the server sends and takes them.\n";
  for (const [name, from, doc] of TYPES) {
    const s = sourceSchema(d, from);
    out += `\n${docComment(doc, "")}`;
    if (s.type === "object" && s.properties) out += `export interface ${name} {\n${tsFields(s, names, "  ")}}\n`;
    // The bare shape: named, it would be written as its own name.
    else out += `export type ${name} = ${tsBare(s, names, "")};\n`;
  }
  return out;
}

// ---- Python

function pyType(s: Schema, names: Names): string {
  if (!s || Object.keys(s).length === 0) return "Any";
  if (s.$ref) {
    const ref = s.$ref.slice(REF.length);
    return names.refs.get(ref) ?? ref;
  }
  const t = names.shapes.get(shapeKey({ ...s, nullable: undefined })) ?? pyBare(s, names);
  return s.nullable === true && t !== "Any" && t !== "None" && !t.startsWith("Optional[") ? `Optional[${t}]` : t;
}

function pyBare(s: Schema, names: Names): string {
  const values = enumValues(s);
  if (values) {
    // null is Python's None, which a Literal need not carry.
    const some = values.filter((v) => v !== null);
    const lit = some.length ? `Literal[${some.map(literal).join(", ")}]` : "None";
    return some.length < values.length && some.length ? `Optional[${lit}]` : lit;
  }
  const parts = s.anyOf ?? s.oneOf;
  if (Array.isArray(parts)) {
    const all = [...new Set(parts.map((p: Schema) => pyType(p, names)))];
    const ts = all.filter((t) => t !== "None");
    const one = ts.length === 1 ? ts[0] : `Union[${ts.join(", ")}]`;
    return ts.length < all.length ? `Optional[${one}]` : one;
  }
  const type = Array.isArray(s.type) ? s.type : [s.type];
  if (type.length > 1) return `Union[${type.map((t: string) => pyBare({ ...s, type: t }, names)).join(", ")}]`;
  switch (type[0]) {
    case "string":
      return "str";
    case "integer":
      return "int";
    case "number":
      return "float";
    case "boolean":
      return "bool";
    case "null":
      return "None";
    case "array":
      return `List[${pyType(s.items, names)}]`;
    case "object":
      if (!s.properties && s.additionalProperties && typeof s.additionalProperties === "object") return `Dict[str, ${pyType(s.additionalProperties, names)}]`;
      return "Dict[str, Any]";
    default:
      return "Any";
  }
}

function pyClass(name: string, s: Schema, doc: string, names: Names): string {
  const required = new Set<string>(s.required ?? []);
  const props = Object.entries<Schema>(s.properties ?? {});
  const line = (k: string, v: Schema) => `${v.description ? `    #: ${v.description}\n` : ""}    ${k}: ${pyType(v, names)}\n`;
  const must = props.filter(([k]) => required.has(k));
  const may = props.filter(([k]) => !required.has(k));
  const docLine = `    """${doc.replace(/"""/g, "'''").replace(/`/g, "``")}"""\n`;
  // TypedDict on Python 3.9 marks optional keys by a class of its own (total=False) over the required ones.
  if (!must.length) return `class ${name}(TypedDict, total=False):\n${docLine}\n${may.map(([k, v]) => line(k, v)).join("") || "    pass\n"}`;
  const base = `class _${name}Required(TypedDict):\n${must.map(([k, v]) => line(k, v)).join("")}`;
  if (!may.length) return `${base}\n\nclass ${name}(_${name}Required):\n${docLine}`;
  return `${base}\n\nclass ${name}(_${name}Required, total=False):\n${docLine}\n${may.map(([k, v]) => line(k, v)).join("")}`;
}

/** sdk/python/forgevm/wire.py as the schemas make it. */
export function pyWire(d: Doc): string {
  const refs = refNames();
  const names: Names = { refs, shapes: inlined(d, refs) };
  let out =
    "# Generated by `npm run docs` from the server's schemas (scripts/sdk-types.ts): do not edit.\n" +
    '"""The wire shapes of the ForgeVM REST API, as the server sends and takes them."""\n\n' +
    "from __future__ import annotations\n\n" +
    "from typing import Any, Dict, List, Literal, Optional, TypedDict, Union\n";
  for (const [name, from, doc] of TYPES) {
    if (PY_DATACLASSES.has(name)) continue;
    const s = sourceSchema(d, from);
    if (s.type === "object" && s.properties) out += `\n\n${pyClass(name, s, doc, names)}`;
    else out += `\n\n#: ${doc}\n${name} = ${pyBare(s, names)}\n`;
  }
  return out;
}
