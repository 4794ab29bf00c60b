// TypeBox schemas of the REST routes for data and images made here: volumes and host directory
// mounts, commit, Dockerfile builds, push. Kept beside schemas.ts (which holds the sandbox, exec,
// file and snapshot messages) so that neither file is a wall of definitions.
import { Type } from "typebox";
import { Body, Image, StringMap } from "./rest.js";

const Argv = Type.Array(Type.String({ maxLength: 4096 }), { minItems: 1, maxItems: 256 });

export const ImageChanges = Body(
  {
    cmd: Type.Optional(Argv),
    entrypoint: Type.Optional(Argv),
    env: Type.Optional(Type.Record(Type.String({ pattern: "^[A-Za-z_][A-Za-z0-9_]*$", maxLength: 256 }), Type.String({ maxLength: 65536 }))),
    workdir: Type.Optional(Type.String({ pattern: "^/", maxLength: 4096 })),
    user: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
    labels: Type.Optional(Type.Record(Type.String({ minLength: 1, maxLength: 256 }), Type.String({ maxLength: 4096 }))),
    expose: Type.Optional(Type.Array(Type.String({ pattern: "^[0-9]{1,5}(/(tcp|udp))?$" }), { maxItems: 100 })),
  },
  { $id: "ImageChanges", description: "What the new image's config changes: Docker's commit --change subset" },
);

export const CommitRequest = Body(
  {
    image: Type.String({ minLength: 1, maxLength: 512, description: "NAME[:TAG] of the new image" }),
    changes: Type.Optional(ImageChanges),
    squash: Type.Optional(Type.Boolean({ description: "one layer holding the whole filesystem instead of one on top of the image's" })),
    comment: Type.Optional(Type.String({ maxLength: 1024 })),
    pause: Type.Optional(Type.Boolean({ description: "stop the guest's processes while its disk is read (default true)" })),
  },
  { $id: "CommitRequest" },
);

export const CommitResult = Type.Object(
  {
    image: Image,
    layer: Type.Object({ digest: Type.String(), size: Type.Integer(), entries: Type.Integer(), whiteouts: Type.Integer() }),
    frozen_ms: Type.Integer(),
    disk_pause_ms: Type.Integer(),
    duration_ms: Type.Integer(),
  },
  { $id: "CommitResult" },
);

/** One instruction of a Dockerfile build and how far it got. */
export const BuildStep = Type.Object(
  {
    stage: Type.Integer(),
    line: Type.Integer(),
    instruction: Type.String(),
    status: Type.Union([Type.Literal("pending"), Type.Literal("running"), Type.Literal("cached"), Type.Literal("done"), Type.Literal("error")]),
    duration_ms: Type.Optional(Type.Integer()),
  },
  { $id: "BuildStep" },
);

export const BuildJob = Type.Object(
  {
    id: Type.String(),
    tag: Type.String(),
    state: Type.Union([Type.Literal("running"), Type.Literal("done"), Type.Literal("error"), Type.Literal("cancelled")]),
    steps: Type.Array(BuildStep),
    log: Type.Array(Type.String(), { description: "The latest log lines." }),
    log_total: Type.Integer(),
    image: Type.Optional(Type.String()),
    digest: Type.Optional(Type.String()),
    error: Type.Optional(Type.String()),
    error_code: Type.Optional(Type.String()),
    started_at: Type.String(),
    finished_at: Type.Optional(Type.String()),
  },
  { $id: "BuildJob" },
);

export const PushRequest = Body(
  { reference: Type.Optional(Type.String({ minLength: 1, maxLength: 512, description: "where to push (default: the image's own name)" })) },
  { $id: "PushRequest" },
);

export const PushResult = Type.Object(
  {
    reference: Type.String(),
    digest: Type.String(),
    uploaded_bytes: Type.Integer(),
    blobs: Type.Array(
      Type.Object({ digest: Type.String(), size: Type.Integer(), status: Type.Union([Type.Literal("exists"), Type.Literal("mounted"), Type.Literal("uploaded")]) }),
    ),
  },
  { $id: "PushResult" },
);

export const MountRequest = Body(
  {
    host: Type.String({ minLength: 1, maxLength: 4096, description: "a host directory inside the config's mounts.host_dirs" }),
    path: Type.String({ pattern: "^/", maxLength: 4096, description: "where it appears in the guest" }),
    read_only: Type.Optional(Type.Boolean()),
  },
  { $id: "MountRequest" },
);

export const Volume = Type.Object(
  {
    name: Type.String(),
    size_mb: Type.Integer(),
    created_at: Type.String(),
    labels: Type.Optional(StringMap),
    used_bytes: Type.Integer({ description: "Bytes its file holds on the host (it is sparse)." }),
    mounted_by: Type.Array(Type.Object({ sandbox: Type.String(), path: Type.String(), read_only: Type.Boolean() })),
  },
  { $id: "Volume" },
);

export const VolumeRequest = Body(
  {
    name: Type.String({ pattern: "^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$" }),
    size_mb: Type.Optional(Type.Integer({ minimum: 16, maximum: 1048576, description: "default 1024" })),
    labels: Type.Optional(StringMap),
  },
  { $id: "VolumeRequest" },
);
