// TypeBox schemas of the REST contract (docs: ../shared/forgevm-api.md). They validate requests
// and generate the OpenAPI document.
import { Type, type Static } from "typebox";

export const EgressEntry = Type.Object(
  {
    ts: Type.String(),
    method: Type.String(),
    host: Type.String(),
    port: Type.Integer(),
    decision: Type.Union([Type.Literal("allow"), Type.Literal("deny")]),
    reason: Type.String(),
    rule: Type.Optional(Type.String()),
    address: Type.Optional(Type.String()),
    error: Type.Optional(Type.String()),
  },
  { $id: "EgressEntry", additionalProperties: true },
);

export const ErrorBody = Type.Object({ code: Type.String(), message: Type.String() }, { $id: "Error" });

export const PortMapping = Type.Object(
  { host_ip: Type.String(), host_port: Type.Integer(), guest_port: Type.Integer() },
  { $id: "PortMapping" },
);

export const Network = Type.Object(
  {
    /** "none": loopback only; "allowlist": the listed hosts through the host's egress proxy; "full": a network device onto the internet (never the host or private networks). */
    mode: Type.Union([Type.Literal("none"), Type.Literal("allowlist"), Type.Literal("full")]),
    allow: Type.Array(Type.String()),
    ports: Type.Array(PortMapping),
    /** The proxy URL the guest's HTTP(S)_PROXY point at (allowlist mode). */
    proxy: Type.Optional(Type.String()),
  },
  { $id: "Network" },
);

export const Sandbox = Type.Object(
  {
    id: Type.String(),
    state: Type.Union([Type.Literal("creating"), Type.Literal("running"), Type.Literal("destroyed"), Type.Literal("error")]),
    provider: Type.String(),
    image: Type.String(),
    memory_mb: Type.Integer(),
    vcpus: Type.Integer(),
    owner_id: Type.Optional(Type.String()),
    created_at: Type.String(),
    expires_at: Type.String(),
    metadata: Type.Optional(Type.Record(Type.String(), Type.String())),
    error: Type.Optional(Type.String()),
    /** Pool mode: the shared VM this sandbox lives in. */
    vm_id: Type.Optional(Type.String()),
    network: Type.Optional(Network),
  },
  { $id: "Sandbox" },
);
export type SandboxT = Static<typeof Sandbox>;

const StringMap = Type.Record(Type.String(), Type.String());

export const SpawnRequest = Type.Object({
  image: Type.Optional(Type.String({ minLength: 1 })),
  provider: Type.Optional(Type.String({ minLength: 1 })),
  memory_mb: Type.Optional(Type.Integer({ minimum: 64, maximum: 65536 })),
  vcpus: Type.Optional(Type.Integer({ minimum: 1, maximum: 64 })),
  disk_mb: Type.Optional(Type.Integer({ minimum: 64, maximum: 1048576 })),
  ttl: Type.Optional(Type.String()),
  template: Type.Optional(Type.String({ minLength: 1 })),
  owner_id: Type.Optional(Type.String({ maxLength: 256 })),
  metadata: Type.Optional(StringMap),
  env: Type.Optional(StringMap),
  user: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  /** Secret values: exec environment and /run/secrets/NAME in the guest; never stored. */
  secrets: Type.Optional(StringMap),
  ...NetworkFields(),
});

/** Network fields of spawn and restore requests. */
function NetworkFields() {
  return {
    network: Type.Optional(Type.String({ minLength: 1, maxLength: 32 })),
    allow: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 300 }), { maxItems: 500 })),
    ports: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 64 })),
  };
}

export const ExecRequest = Type.Object({
  command: Type.String({ minLength: 1 }),
  args: Type.Optional(Type.Array(Type.String())),
  env: Type.Optional(StringMap),
  workdir: Type.Optional(Type.String({ minLength: 1 })),
  timeout: Type.Optional(Type.String()),
  stream: Type.Optional(Type.Boolean()),
  user: Type.Optional(Type.String({ minLength: 1 })),
  stdin: Type.Optional(Type.String()),
  /** "base64" when `stdin` carries bytes that are not text. */
  stdin_encoding: Type.Optional(Type.Union([Type.Literal("utf8"), Type.Literal("base64")])),
});
export type ExecRequestT = Static<typeof ExecRequest>;

export const ExecResult = Type.Object({
  exit_code: Type.Integer(),
  stdout: Type.String(),
  stderr: Type.String(),
  duration: Type.String(),
  timed_out: Type.Boolean(),
  truncated: Type.Boolean(),
});

export const FileWrite = Type.Object({
  path: Type.String({ minLength: 1 }),
  content: Type.String(),
  mode: Type.Optional(Type.String({ pattern: "^0?[0-7]{3,4}$" })),
  encoding: Type.Optional(Type.Union([Type.Literal("utf8"), Type.Literal("utf-8"), Type.Literal("base64")])),
});

export const FileInfo = Type.Object(
  {
    path: Type.String(),
    name: Type.String(),
    size: Type.Integer(),
    mode: Type.String(),
    is_dir: Type.Boolean(),
    mod_time: Type.String(),
  },
  { $id: "FileInfo" },
);

export const PathQuery = Type.Object({ path: Type.String({ minLength: 1 }) });
export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });
export const Status = (value: string) => Type.Object({ status: Type.Literal(value) });

export const Snapshot = Type.Object(
  {
    id: Type.String(),
    name: Type.Optional(Type.String()),
    kind: Type.Union([Type.Literal("sandbox"), Type.Literal("fork"), Type.Literal("base")]),
    state: Type.String(),
    source_id: Type.Optional(Type.String()),
    image: Type.String(),
    template: Type.Optional(Type.String()),
    memory_mb: Type.Integer(),
    vcpus: Type.Integer(),
    disk_mb: Type.Integer(),
    format: Type.Union([Type.Literal("mapped"), Type.Literal("stream")]),
    size_bytes: Type.Integer(),
    created_at: Type.String(),
  },
  { $id: "Snapshot" },
);
export type SnapshotT = Static<typeof Snapshot>;

/** Fork and snapshot-restore requests: how many copies and how they live. */
export const CopiesRequest = Type.Object({
  count: Type.Optional(Type.Integer({ minimum: 1, maximum: 32 })),
  ttl: Type.Optional(Type.String()),
  owner_id: Type.Optional(Type.String({ maxLength: 256 })),
  metadata: Type.Optional(StringMap),
  /** Restores only (forks keep the parent's network). */
  network: Type.Optional(Type.String({ minLength: 1, maxLength: 32 })),
  allow: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 300 }), { maxItems: 500 })),
});
