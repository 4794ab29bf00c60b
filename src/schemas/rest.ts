// Past 400 lines because it is the whole REST contract in one place: every shape a route takes or
// gives, beside the shapes it is built from.
// TypeBox schemas of the REST contract: one definition per
// wire message. They validate requests, shape responses and generate the OpenAPI document
// (committed as docs/openapi.json; a test fails when it drifts). Request bodies refuse fields
// they do not define, so a typo is a 400 that names it rather than a default taking its place.
import { Type, type Static } from "typebox";
import { Body, StringMap } from "./fields.js";
import { MAX_TTL_MS } from "./durations.js";
import { DiskMb, MemoryMb, Vcpus } from "./fields.js";
import { ScreenRequest } from "./desktop.js";

export { Body };

export { StringMap };

/** The keyword that marks a body the route reads as a stream: documented, never validated (app.ts). */
export const RAW_BODY = "x-raw-body";

/** A body read as a stream (a tar, a file's bytes); its route checks it while it reads it. */
export const RawBody = (description: string) => Type.Unsafe<unknown>({ type: "string", format: "binary", description, [RAW_BODY]: true });

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
    injected: Type.Optional(Type.String({ description: "The egress rule (its destination) whose headers the proxy added; never a value." })),
    headers: Type.Optional(Type.Array(Type.String(), { description: "The names of the headers it added." })),
  },
  { $id: "EgressEntry", additionalProperties: true },
);

export const EgressRule = Type.Object(
  { headers: Type.Record(Type.String({ maxLength: 64 }), Type.String({ maxLength: 2048 }), { description: "Header name → value; {{NAME}} names a stored secret." }) },
  { $id: "EgressRule", additionalProperties: false, description: "The headers the egress proxy adds to requests for one destination." },
);

export const EgressRules = Type.Record(Type.String({ maxLength: 130 }), EgressRule, {
  $id: "EgressRules",
  description:
    'Headers the egress proxy adds to requests per destination (a hostname or *.domain on the allowlist), secrets named by placeholder: {"api.openai.com": {"headers": {"Authorization": "Bearer {{OPENAI_KEY}}"}}}. The values stay on the host.',
});

export const ErrorBody = Type.Object(
  {
    code: Type.String({ description: "one of the codes in docs/errors.md" }),
    message: Type.String(),
    retryable: Type.Boolean(),
    sandbox_id: Type.Optional(Type.String({ description: "set when the sandbox itself is unknown or not running" })),
    errno: Type.Optional(Type.String({ description: "the guest's errno name (ENOENT, ENOSPC…) when its kernel refused" })),
  },
  { $id: "Error" },
);

export const PortMapping = Type.Object({ host_ip: Type.String(), host_port: Type.Integer(), guest_port: Type.Integer() }, { $id: "PortMapping" });

const DenyList = Type.Array(Type.String({ minLength: 1, maxLength: 64 }), {
  maxItems: 500,
  description:
    "Allowlist mode: egress is open to every public destination but these addresses and CIDR networks (the allowlist still wins); left out, only the allowlist is reachable.",
});

export const Network = Type.Object(
  {
    mode: Type.Union([Type.Literal("none"), Type.Literal("allowlist"), Type.Literal("full")], {
      description:
        '"none": loopback only; "allowlist": the listed hosts through the host\'s egress proxy; "full": a network device onto the internet (never the host or private networks).',
    }),
    allow: Type.Array(Type.String()),
    ports: Type.Array(PortMapping),
    proxy: Type.Optional(Type.String({ description: "The proxy URL the guest's HTTP(S)_PROXY point at (allowlist mode)." })),
    cache: Type.Optional(Type.Boolean({ description: "Package files fetched over HTTP go through the host's package cache." })),
    egress_rules: Type.Optional(EgressRules),
    deny: Type.Optional(DenyList),
  },
  { $id: "Network" },
);

/** A main process's health, as Docker reports a container's: its status, the failures in a row, the last checks (stored as sent). */
export const HealthState = Type.Object(
  {
    status: Type.Union([Type.Literal("starting"), Type.Literal("healthy"), Type.Literal("unhealthy")]),
    failing_streak: Type.Integer({ description: "checks failed in a row" }),
    log: Type.Array(
      Type.Object({
        start: Type.String(),
        end: Type.String(),
        exit_code: Type.Integer({ description: "-1: it ran past its timeout, or could not run" }),
        output: Type.String(),
      }),
      { description: "the last five checks" },
    ),
  },
  { description: "the image's HEALTHCHECK, run while the main process runs (as Docker's State.Health)" },
);

/** A sandbox's main process: its command, restart policy and last run. */
export const MainInfo = Type.Object(
  {
    command: Type.Array(Type.String()),
    restart: Type.String(),
    restarts: Type.Integer(),
    running: Type.Boolean(),
    exit_code: Type.Union([Type.Integer(), Type.Null()]),
    started_at: Type.Union([Type.String(), Type.Null()]),
    finished_at: Type.Union([Type.String(), Type.Null()]),
    health: Type.Optional(HealthState),
  },
  { $id: "MainInfo" },
);

/** A process the sandbox keeps track of (GET /sandboxes/{id}/processes). */
export const ProcessInfo = Type.Object(
  {
    pid: Type.Integer({ description: "the guest's pid" }),
    command: Type.Array(Type.String()),
    tag: Type.Optional(Type.String()),
    running: Type.Boolean(),
    adopted: Type.Boolean({ description: "taken over from a server that went away: what it wrote meanwhile comes first to the first follower" }),
  },
  { $id: "ProcessInfo" },
);

export const VolumeMount = Type.Object({ name: Type.String(), path: Type.String(), read_only: Type.Boolean() }, { $id: "VolumeMount" });

export const HostDirMount = Type.Object({ host: Type.String(), path: Type.String(), read_only: Type.Boolean() }, { $id: "HostDirMount" });

/** What a sandbox does once idle: after `after` with nothing in flight, `pause` (resumed by the next call), `stop` or nothing. */
export const IdleSpec = Type.Object(
  {
    after: Type.String({ minLength: 1, maxLength: 32, description: 'a duration such as "30s" or "5m" (at least 1s)' }),
    action: Type.Union([Type.Literal("pause"), Type.Literal("stop"), Type.Literal("none")], { default: "pause" }),
  },
  { additionalProperties: false, $id: "IdleSpec" },
);

export const Sandbox = Type.Object(
  {
    id: Type.String(),
    state: Type.Union([
      Type.Literal("created"),
      Type.Literal("creating"),
      Type.Literal("running"),
      Type.Literal("paused"),
      Type.Literal("stopped"),
      Type.Literal("destroyed"),
      Type.Literal("error"),
    ]),
    name: Type.Optional(Type.String({ description: "Its name, when it was given one (usable wherever an id is)." })),
    user: Type.Optional(Type.String({ description: "The account commands (and ssh) run as when a call names none, when it is not root." })),
    provider: Type.String(),
    node: Type.Optional(Type.String({ description: "In a cluster: the node it lives on." })),
    warning: Type.Optional(Type.String({ description: "Said by sandboxes whose provider is no security boundary (local)." })),
    image: Type.String(),
    memory_mb: Type.Integer(),
    vcpus: Type.Integer(),
    owner_id: Type.Optional(Type.String()),
    created_at: Type.String(),
    expires_at: Type.Union([Type.String(), Type.Null()], { description: "null: it lives until it is destroyed (ttl 0, or a service with a restart policy)" }),
    metadata: Type.Optional(StringMap),
    error: Type.Optional(Type.String({ description: 'Why it failed (state "error").' })),
    destroyed_at: Type.Optional(Type.String({ description: 'When it ended (state "destroyed" or "error").' })),
    end_reason: Type.Optional(
      Type.String({
        description:
          'Why it ended: "request" (someone asked), "ttl", "auto-delete" (Daytona), "session end" (the MCP session that made it), "server stop" (server.on_stop: destroy), or "failed".',
      }),
    ),
    ended_by: Type.Optional(Type.String({ description: 'Who ended it: the interface the request came through ("rest", "e2b", "daytona", "mcp", "custom-http") or "server".' })),
    vm_id: Type.Optional(Type.String({ description: "Pool mode: the shared VM this sandbox lives in." })),
    network: Type.Optional(Network),
    main: Type.Optional(MainInfo),
    idle_stop: Type.Optional(Type.String({ description: "Its idle stop, as a duration (when its idle action is `stop`; the older name of `idle`)." })),
    /** What it does once idle. */
    idle: Type.Optional(IdleSpec),
    paused_reason: Type.Optional(
      Type.String({
        description: 'Why it is paused (state "paused"): "request", "timeout", "idle", or "server" (its server stopped with server.on_stop: pause, and its next start resumes it).',
      }),
    ),
    forkable: Type.Optional(Type.Boolean({ description: "Its RAM is a file of its own: a fork stops it only to copy that file, and a pause hands it over." })),
    init: Type.Optional(Type.Literal("systemd", { description: "It boots its image's systemd as init, the agent as its first service (docs/system-images.md)." })),
    volumes: Type.Optional(Type.Array(VolumeMount, { description: "Named volumes it mounts." })),
    host_dirs: Type.Optional(Type.Array(HostDirMount, { description: "Host directories it mounts (live)." })),
  },
  { $id: "Sandbox" },
);
export type SandboxT = Static<typeof Sandbox>;

/** Network fields of spawn and restore requests. */
const NetworkFields = {
  network: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 32,
      description: '"none" (loopback only, the default), "allowlist" (listed hosts through the egress proxy) or "full" (a network device onto the internet, never the host).',
    }),
  ),
  allow: Type.Optional(
    Type.Array(Type.String({ minLength: 1, maxLength: 300 }), {
      maxItems: 500,
      description: 'Egress allowlist: hosts, *.domains, IPs/CIDRs, with :port, and @presets such as "@pypi".',
    }),
  ),
};

/** What a sandbox has forwarded from the host (spawns, templates). */
const Forward = Type.Array(Type.String({ minLength: 1, maxLength: 32 }), {
  maxItems: 4,
  description:
    'Credentials forwarded from the host while it runs: "ssh-agent" (its SSH_AUTH_SOCK reaches the ssh agent where the server runs: signatures, never keys), "git" (git\'s credential helper asks the server\'s user\'s `git credential fill`, for http(s) hosts its egress allows). Nothing unless asked.',
});

export const SpawnRequest = Body(
  {
    egress_rules: Type.Optional(EgressRules),
    deny: Type.Optional(DenyList),
    image: Type.Optional(Type.String({ minLength: 1, description: "Image name; the server's default when left out." })),
    provider: Type.Optional(Type.String()),
    memory_mb: Type.Optional(MemoryMb()),
    vcpus: Type.Optional(Vcpus()),
    disk_mb: Type.Optional(DiskMb()),
    ttl: Type.Optional(Type.String({ description: 'Lifetime as a duration string, e.g. "30m" ("0": until destroyed).' })),
    template: Type.Optional(Type.String({ minLength: 1 })),
    owner_id: Type.Optional(Type.String({ maxLength: 256 })),
    metadata: Type.Optional(StringMap),
    env: Type.Optional(StringMap),
    user: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'Who commands run as by default ("image" for the image\'s USER).' })),
    /** Secret values: exec environment and /run/secrets/NAME in the guest; never stored. */
    secrets: Type.Optional(StringMap),
    ...NetworkFields,
    ports: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 64, description: 'Published ports, "[ADDRESS:]HOST:GUEST" (127.0.0.1 unless an address is given).' }),
    ),
    cache: Type.Optional(Type.Boolean({ description: "Allowlist mode: package files fetched over HTTP go through the host's package cache (default: network.cache)." })),
    volumes: Type.Optional(
      Type.Array(Type.String({ minLength: 3, maxLength: 4200 }), {
        maxItems: 16,
        description: 'Named volumes to mount: "NAME:/path" or "NAME:/path:ro"; a missing volume is created.',
      }),
    ),
    idle_stop: Type.Optional(
      Type.String({ minLength: 1, description: 'Stop it (disk kept) after this long without exec, file calls or published-port traffic ("30m"): `idle` with action "stop".' }),
    ),
    /** Pause (or stop) it once idle; any call for a paused sandbox resumes it first. Default: the server's `defaults.idle`. */
    idle: Type.Optional(IdleSpec),
    forkable: Type.Optional(
      Type.Boolean({
        description:
          "Keep its RAM in a file of its own: forks stop it only to copy that file (children share the copy's pages), pauses and resumes copy nothing. Default: its template's, else false.",
      }),
    ),
    screen: Type.Optional(ScreenRequest),
    name: Type.Optional(
      Type.String({ pattern: "^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$", description: "A name to use instead of the id anywhere (unique among sandboxes not yet gone)." }),
    ),
    forward: Type.Optional(Forward),
    system: Type.Optional(
      Type.Boolean({
        description:
          "Boot the image's systemd as init, with the ForgeVM agent as its first service (docs/system-images.md). Default: what the image says (a system image, or the label org.forgevm.init=systemd). Refused for an image without systemd.",
      }),
    ),
    start: Type.Optional(Type.Boolean({ description: "false: define it without starting it (state `created`; POST /sandboxes/{id}/start boots it)." })),
    main: Type.Optional(
      Type.Object(
        {
          command: Type.Optional(Type.Array(Type.String(), { maxItems: 4096 })),
          restart: Type.Optional(Type.String({ pattern: "^(no|always|unless-stopped|on-failure(:[0-9]{1,4})?)$" })),
        },
        { additionalProperties: false, description: "Run a main process: the image's ENTRYPOINT with `command` (else its CMD), under a restart policy." },
      ),
    ),
  },
  { $id: "SpawnRequest" },
);

export const ExtendRequest = Body({ ttl: Type.String() }, { $id: "ExtendRequest" });

/** What every exec names, however it arrives. */
const ExecFields = {
  command: Type.String({ minLength: 1 }),
  args: Type.Optional(Type.Array(Type.String())),
  env: Type.Optional(StringMap),
  workdir: Type.Optional(Type.String({ minLength: 1 })),
  timeout: Type.Optional(Type.String()),
  user: Type.Optional(Type.String({ minLength: 1 })),
};

export const ExecRequest = Body(
  {
    ...ExecFields,
    stream: Type.Optional(Type.Boolean()),
    stdin: Type.Optional(Type.String()),
    stdin_encoding: Type.Optional(Type.Union([Type.Literal("utf8"), Type.Literal("base64")], { description: '"base64" when `stdin` carries bytes that are not text.' })),
  },
  { $id: "ExecRequest" },
);
export type ExecRequestT = Static<typeof ExecRequest>;

/** The first message of an exec over WebSocket: an exec request, with a terminal if asked. */
export const WsExecRequest = Body(
  {
    ...ExecFields,
    tty: Type.Optional(Type.Boolean()),
    rows: Type.Optional(Type.Integer({ minimum: 1, maximum: 9999 })),
    cols: Type.Optional(Type.Integer({ minimum: 1, maximum: 9999 })),
    encoding: Type.Optional(
      Type.Union([Type.Literal("utf8"), Type.Literal("base64")], { description: '"base64": stdin messages and output chunks carry bytes as base64 (binary-safe); default text.' }),
    ),
  },
  { $id: "WsExecRequest" },
);

export const ExecResult = Type.Object(
  {
    exit_code: Type.Integer(),
    stdout: Type.String(),
    stderr: Type.String(),
    duration: Type.String({ description: 'Duration string, e.g. "107ms".' }),
    timed_out: Type.Boolean(),
    truncated: Type.Boolean(),
  },
  { $id: "ExecResult" },
);

export const FileWrite = Body(
  {
    path: Type.String({ minLength: 1 }),
    content: Type.String(),
    mode: Type.Optional(Type.String({ pattern: "^0?[0-7]{3,4}$" })),
    encoding: Type.Optional(Type.Union([Type.Literal("utf8"), Type.Literal("utf-8"), Type.Literal("base64")])),
  },
  { $id: "FileWrite" },
);

export const MoveRequest = Body({ old_path: Type.String(), new_path: Type.String() }, { $id: "MoveRequest" });
export const ChmodRequest = Body({ path: Type.String(), mode: Type.String() }, { $id: "ChmodRequest" });

export const FileInfo = Type.Object(
  {
    path: Type.String(),
    name: Type.String(),
    size: Type.Integer(),
    mode: Type.String({ description: 'Permission bits in octal, e.g. "644".' }),
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
    kind: Type.Union([Type.Literal("sandbox"), Type.Literal("fork"), Type.Literal("base"), Type.Literal("pause")]),
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

const NAME = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$";

export const SnapshotRequest = Body({ name: Type.Optional(Type.String({ pattern: NAME })) }, { $id: "SnapshotRequest" });

/** Fork and snapshot-restore requests: how many copies and how they live. */
export const CopiesRequest = Body(
  {
    count: Type.Optional(Type.Integer({ minimum: 1, maximum: 32 })),
    ttl: Type.Optional(Type.String()),
    owner_id: Type.Optional(Type.String({ maxLength: 256 })),
    metadata: Type.Optional(StringMap),
    forkable: Type.Optional(
      Type.Boolean({ description: "Each copy keeps its RAM in a file of its own, so it can be forked fast in turn (default false: copies share the snapshot's pages)." }),
    ),
    /** Restores only (forks keep the parent's network). */
    ...NetworkFields,
  },
  { $id: "CopiesRequest" },
);

export const NetworkUpdate = Body(
  {
    mode: Type.Optional(Type.Union([Type.Literal("none"), Type.Literal("allowlist"), Type.Literal("full")], { description: '"full" only for a sandbox made with it.' })),
    allow: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 300 }), { maxItems: 500 })),
    deny: Type.Optional(Type.Union([DenyList, Type.Null()])),
    egress_rules: Type.Optional(Type.Union([EgressRules, Type.Null()])),
  },
  { $id: "NetworkUpdate", description: "Changes a running sandbox's egress; a field left out keeps its value, null clears it." },
);

export const EgressRulesRequest = Body({ egress_rules: EgressRules }, { $id: "EgressRulesRequest", description: "Replaces the sandbox's egress rules; {} clears them." });

export const SecretInfo = Type.Object(
  {
    id: Type.String(),
    name: Type.String({ description: "Lower case: names are matched without regard to case." }),
    description: Type.Union([Type.String(), Type.Null()]),
    metadata: StringMap,
    version: Type.Integer({ description: "Goes up by one with each new value." }),
    created_at: Type.String(),
    updated_at: Type.String(),
  },
  { $id: "SecretInfo", description: "A secret as every answer shows it: never its value." },
);

const SecretFields = {
  value: Type.String({ minLength: 1, maxLength: 65536, description: "The secret; never returned, never logged, sealed at rest." }),
  description: Type.Optional(Type.Union([Type.String({ maxLength: 1024 }), Type.Null()])),
  metadata: Type.Optional(Type.Record(Type.String({ minLength: 1, maxLength: 128 }), Type.String({ maxLength: 1024 }), { maxProperties: 32 })),
};
export const SecretCreate = Body({ name: Type.String({ minLength: 1, maxLength: 128, pattern: "^\\s*[A-Za-z0-9_-]+\\s*$" }), ...SecretFields }, { $id: "SecretCreate" });
export const SecretUpdate = Body(SecretFields, { $id: "SecretUpdate" });

export const AllowRequest = Body({ allow: Type.Array(Type.String({ minLength: 1, maxLength: 300 }), { maxItems: 500 }) }, { $id: "AllowRequest" });
export const PortRequest = Body({ port: Type.String({ minLength: 1, maxLength: 64 }) }, { $id: "PortRequest" });
export const PullRequest = Body({ image: Type.String({ minLength: 1 }) }, { $id: "PullRequest" });

const SecretDecl = Type.Object(
  { name: Type.String({ minLength: 1, maxLength: 128 }), inject_at: Type.Optional(Type.Union([Type.Literal("env"), Type.Literal("file"), Type.Literal("both")])) },
  { additionalProperties: false },
);

/** Template fields a client sends; `vcpus`/`ttl` are the original SDKs' names for `cpu_cores`/`ttl_seconds`. */
export const TemplateFields = {
  version: Type.Optional(Type.String()),
  image: Type.Optional(Type.String({ minLength: 1 })),
  description: Type.Optional(Type.String()),
  setup: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { maxItems: 100 })),
  allowed_hosts: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 300 }), { maxItems: 500 })),
  /** Headers the egress proxy adds to its sandboxes' requests per destination (on allowed_hosts), secrets by placeholder. */
  egress_rules: Type.Optional(EgressRules),
  memory_mb: Type.Optional(MemoryMb()),
  cpu_cores: Type.Optional(Vcpus()),
  vcpus: Type.Optional(Vcpus()),
  ttl_seconds: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_TTL_MS / 1000, description: "0: its sandboxes live until destroyed" })),
  ttl: Type.Optional(Type.Union([Type.String(), Type.Integer({ minimum: 0, maximum: MAX_TTL_MS / 1000 })])),
  env: Type.Optional(StringMap),
  secrets: Type.Optional(Type.Array(SecretDecl, { maxItems: 64 })),
  pool_size: Type.Optional(Type.Integer({ minimum: 0, maximum: 64 })),
  /** What its sandboxes do once idle. */
  idle: Type.Optional(IdleSpec),
  forkable: Type.Optional(Type.Boolean({ description: "Its sandboxes keep their RAM in a file of their own (fast forks and pauses)." })),
  forward: Type.Optional(Forward),
  system: Type.Optional(Type.Boolean({ description: "Its sandboxes boot their image's systemd as init (default: what the image says; docs/system-images.md)." })),
  provider: Type.Optional(Type.String({ description: 'The provider its sandboxes run on ("" or absent: the server\'s default).' })),
  /** Copied into the metadata of every sandbox spawned from it. */
  metadata: Type.Optional(StringMap),
  created_at: Type.Optional(Type.String({ description: "Set by the server; a value sent (an SDK echoing a template it read) is ignored." })),
  updated_at: Type.Optional(Type.String()),
};

export const TemplateInput = Body({ name: Type.String({ pattern: NAME }), ...TemplateFields }, { $id: "TemplateInput" });
export type TemplateInputT = Static<typeof TemplateInput>;
export const TemplateUpdate = Body({ name: Type.Optional(Type.String()), ...TemplateFields }, { $id: "TemplateUpdate" });

export const Template = Type.Object(
  {
    name: Type.String(),
    version: Type.String(),
    image: Type.String(),
    description: Type.String(),
    setup: Type.Array(Type.String(), { description: "Commands run once, before the template's base snapshot." }),
    allowed_hosts: Type.Array(Type.String(), { description: "Egress allowlist of its sandboxes (and of its setup commands)." }),
    egress_rules: Type.Optional(EgressRules),
    memory_mb: Type.Integer(),
    cpu_cores: Type.Integer(),
    vcpus: Type.Integer({ description: "The same as cpu_cores (the name the original SDKs read)." }),
    ttl_seconds: Type.Integer(),
    ttl: Type.String({ description: "The same as ttl_seconds, as a duration string (the name the original SDKs read)." }),
    env: StringMap,
    secrets: Type.Array(Type.Object({ name: Type.String(), inject_at: Type.Optional(Type.Union([Type.Literal("env"), Type.Literal("file"), Type.Literal("both")])) }), {
      description: "Secrets its sandboxes need; the values come with each spawn (or from the server's FORGEVM_SECRET_<NAME>).",
    }),
    pool_size: Type.Integer({ description: "Warm sandboxes kept ready." }),
    idle: Type.Optional(IdleSpec),
    forkable: Type.Optional(Type.Boolean()),
    forward: Type.Optional(Forward),
    system: Type.Optional(Type.Boolean()),
    provider: Type.String(),
    metadata: StringMap,
    created_at: Type.String(),
    updated_at: Type.String(),
  },
  { $id: "Template" },
);

export const TemplateSpawnRequest = Body(
  {
    provider: Type.Optional(Type.String()),
    ttl: Type.Optional(Type.String()),
    owner_id: Type.Optional(Type.String({ maxLength: 256 })),
    metadata: Type.Optional(StringMap),
    secrets: Type.Optional(StringMap),
  },
  { $id: "TemplateSpawnRequest" },
);

export const Image = Type.Object(
  {
    name: Type.String(),
    digest: Type.Optional(Type.String()),
    size: Type.Integer(),
    created_at: Type.String(),
    source: Type.String(),
    in_use: Type.Boolean(),
    layers: Type.Optional(Type.Integer({ description: "How many layers its manifest lists (absent until the image has a manifest)." })),
    parent: Type.Optional(Type.String({ description: "The image a commit made it from." })),
  },
  { $id: "Image" },
);

export const PullJob = Type.Object(
  {
    id: Type.String(),
    image: Type.String(),
    state: Type.Union([Type.Literal("running"), Type.Literal("done"), Type.Literal("error")]),
    progress: Type.Array(Type.String(), { description: "The latest progress lines." }),
    progress_total: Type.Integer({ description: "How many progress lines there have been in all." }),
    error: Type.Optional(Type.String()),
    error_code: Type.Optional(Type.String()),
    digest: Type.Optional(Type.String()),
    started_at: Type.String(),
    finished_at: Type.Optional(Type.String()),
  },
  { $id: "PullJob" },
);

/** Runs code in a stateful code context (the default one of its language unless `context` names one). */
export const CodeRequest = Body(
  {
    code: Type.String({ maxLength: 16 * 1024 * 1024 }),
    language: Type.Optional(Type.String({ minLength: 1, maxLength: 32, description: "python (default), javascript (typescript, js, ts) or bash (sh)." })),
    context: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    /** Environment of this execution only. */
    env: Type.Optional(StringMap),
    timeout: Type.Optional(Type.String({ description: 'Interrupt the code after this long ("30s"); the context keeps its state.' })),
    stream: Type.Optional(Type.Boolean({ description: "Answer with NDJSON events as they happen instead of one JSON body at the end." })),
  },
  { $id: "CodeRequest" },
);

/** The value of the code's last expression (is_main_result), or a figure it drew, in every format it has. */
export const CodeResult = Type.Object(
  {
    is_main_result: Type.Boolean(),
    text: Type.Optional(Type.String()),
    html: Type.Optional(Type.String()),
    markdown: Type.Optional(Type.String()),
    svg: Type.Optional(Type.String()),
    png: Type.Optional(Type.String({ description: "base64" })),
    jpeg: Type.Optional(Type.String({ description: "base64" })),
    latex: Type.Optional(Type.String()),
    json: Type.Optional(Type.Unknown()),
    javascript: Type.Optional(Type.String()),
  },
  { $id: "CodeResult" },
);

export const CodeError = Type.Object({ name: Type.String(), value: Type.String(), traceback: Type.String() }, { $id: "CodeError" });

export const Execution = Type.Object(
  {
    results: Type.Array(CodeResult),
    stdout: Type.String(),
    stderr: Type.String(),
    error: Type.Union([CodeError, Type.Null()], { description: "The exception the code raised (null when it ran to its end)." }),
    execution_count: Type.Integer(),
    context: Type.String({ description: "The context it ran in." }),
    duration: Type.String(),
  },
  { $id: "Execution" },
);

export const CodeContext = Type.Object(
  {
    id: Type.String(),
    language: Type.String(),
    cwd: Type.String(),
    user: Type.Union([Type.String(), Type.Null()], { description: "Who its code runs as (null: the sandbox's default user)." }),
  },
  { $id: "CodeContext" },
);

export const CodeContextRequest = Body(
  {
    language: Type.Optional(Type.String({ minLength: 1, maxLength: 32 })),
    cwd: Type.Optional(Type.String({ minLength: 1 })),
    user: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  },
  { $id: "CodeContextRequest" },
);
