// The Environments API's shapes (the original's, plus `steps` and the connection's `registry`),
// validated on the way in and serialized on the way out from these definitions.
import { Type } from "typebox";
import { BuildStep } from "./images.js";

const Packages = Type.Array(Type.String({ maxLength: 256 }), { maxItems: 500 });
const Status = Type.Union([Type.Literal("queued"), Type.Literal("building"), Type.Literal("ready"), Type.Literal("failed"), Type.Literal("canceled")]);

export const EnvSpecRequest = Type.Object(
  {
    owner_id: Type.Optional(Type.String({ maxLength: 128, description: "whose environment (else the X-User-ID header)" })),
    name: Type.String({ maxLength: 128 }),
    base_image: Type.String({ maxLength: 512 }),
    python_packages: Type.Optional(Packages),
    apt_packages: Type.Optional(Packages),
    python_version: Type.Optional(Type.Union([Type.String({ maxLength: 16 }), Type.Null()])),
  },
  { additionalProperties: false },
);

export const EnvSpec = Type.Object(
  {
    id: Type.String(),
    owner_id: Type.String(),
    name: Type.String(),
    base_image: Type.String(),
    python_packages: Type.Array(Type.String()),
    apt_packages: Type.Array(Type.String()),
    python_version: Type.Optional(Type.String()),
    created_at: Type.String(),
    updated_at: Type.String(),
  },
  { $id: "EnvSpec" },
);

export const EnvArtifact = Type.Object(
  {
    target: Type.String(),
    image_ref: Type.String(),
    digest: Type.Optional(Type.String()),
    status: Type.Union([Type.Literal("pending"), Type.Literal("pushing"), Type.Literal("ready"), Type.Literal("failed"), Type.Literal("canceled")]),
    error: Type.Optional(Type.String()),
    created_at: Type.String(),
    updated_at: Type.String(),
  },
  { $id: "EnvArtifact" },
);

export const EnvBuild = Type.Object(
  {
    id: Type.String(),
    spec_id: Type.String(),
    owner_id: Type.String(),
    status: Status,
    current_step: Type.Union([Type.String(), Type.Null()]),
    log: Type.String(),
    image_size_bytes: Type.Integer(),
    digest_local: Type.Optional(Type.String()),
    error: Type.Optional(Type.String()),
    visibility: Type.Optional(Type.String()),
    steps: Type.Array(BuildStep),
    created_at: Type.String(),
    finished_at: Type.Optional(Type.String()),
    updated_at: Type.String(),
    artifacts: Type.Array(EnvArtifact),
  },
  { $id: "EnvBuild" },
);

export const EnvBuildRequest = Type.Object(
  {
    spec_id: Type.String({ maxLength: 128 }),
    targets: Type.Optional(Type.Array(Type.String({ maxLength: 128 }), { maxItems: 20, description: "local, ghcr, dockerhub or registry connection ids (default [local])" })),
    visibility: Type.Optional(Type.String({ maxLength: 32 })),
  },
  { additionalProperties: false },
);

export const SpawnConfig = Type.Object(
  {
    build_id: Type.String(),
    build_status: Status,
    ready: Type.Boolean(),
    provider: Type.String(),
    image: Type.String(),
    target: Type.String(),
    digest: Type.Union([Type.String(), Type.Null()]),
    note: Type.String(),
  },
  { $id: "EnvSpawnConfig" },
);

export const ConnectionRequest = Type.Object(
  {
    id: Type.Optional(Type.String({ maxLength: 128 })),
    owner_id: Type.Optional(Type.String({ maxLength: 128 })),
    provider: Type.String({ maxLength: 32, description: "ghcr, dockerhub, or registry (with `registry`)" }),
    username: Type.String({ maxLength: 128 }),
    secret_ref: Type.String({ maxLength: 8192, description: "the token or password (stored encrypted), or secret:NAME for a secret the operator configured" }),
    is_default: Type.Optional(Type.Boolean()),
    registry: Type.Optional(Type.String({ maxLength: 260, description: "host[:port] of the registry; required with provider registry" })),
  },
  { additionalProperties: false },
);

export const Connection = Type.Object(
  {
    id: Type.String(),
    owner_id: Type.String(),
    provider: Type.String(),
    registry: Type.String(),
    username: Type.String(),
    is_default: Type.Boolean(),
    secret_storage: Type.Union([Type.Literal("encrypted"), Type.Literal("operator")]),
    secret_ref: Type.Optional(Type.String()),
    created_at: Type.String(),
    updated_at: Type.String(),
  },
  { $id: "RegistryConnection" },
);
