// Local images: pulls (verified, shared between concurrent callers, or as background jobs),
// imports, listing and removal, commits of a sandbox's disk, exports and pushes.
import type { Readable } from "node:stream";
import type { BlobStore } from "../../images/blobs.js";
import type { Credentials, RegistryOptions } from "../../images/registry.js";
import { canonicalName, type ImageSize, listImages, type LocalImage, resolveImage } from "../../images/store.js";
import { commit, type CommitDeps, type CommitOptions, type CommitResult } from "../images/commit.js";
import type { SnapshotStore } from "../../store/snapshots.js";
import type { DiskSpace } from "../host/disk-space.js";
import type { ImageWork } from "../images/image-layers.js";
import { exportImage, pushImage, type PushedBlob, type PushResult, type TransferDeps } from "../images/image-transfer.js";
import { parseImageReference, type Images, type ImportOptions } from "../images/images.js";
import { PullJobs, type PullJob } from "../images/pull-jobs.js";
import type { Sandbox } from "../guest/sandbox.js";
import type { SandboxLookup } from "./lookup.js";

/** A local image as every interface lists it. */
export interface ImageInfo {
  name: string;
  digest?: string;
  size: number;
  createdAt: string;
  source: string;
  layers?: string[];
  parent?: string;
  inUse: boolean;
}

/** How every interface lists a local image. */
export function imageInfo(i: LocalImage, inUse: boolean): ImageInfo {
  return {
    name: i.name,
    ...(i.digest ? { digest: i.digest } : {}),
    size: i.size,
    createdAt: i.createdAt,
    source: i.source,
    ...(i.layers ? { layers: i.layers } : {}),
    ...(i.parent ? { parent: i.parent } : {}),
    inUse,
  };
}

/** What image operations need from outside the core context: throwaway sandboxes, and who uses an image. */
export interface ImageHooks {
  blobs: BlobStore;
  sandboxes: SandboxLookup;
  /** Starts a throwaway sandbox of an image (no network) to read or write its files. */
  spawnHelper: (image: string) => Promise<Sandbox>;
  destroy: (id: string) => Promise<void>;
}

/** What the image operations use: the image service, the disk's room, the snapshot rows an image's removal checks, and what a commit, an export and a push take. */
export interface ImagesDeps extends CommitDeps, TransferDeps {
  readonly images: Images;
  readonly disk: DiskSpace;
  readonly snapshotRows: SnapshotStore;
}

export class ImagesFacade {
  private readonly pullJobs = new PullJobs((ref, log) => this.pull(ref, log));

  constructor(
    private readonly core: ImagesDeps,
    private readonly hooks: ImageHooks,
  ) {}

  /** Pulls an image from its registry (verifying every byte) and installs it; concurrent pulls of one image share the work. */
  async pull(reference: string, log?: (m: string) => void, onLayerBytes?: RegistryOptions["onLayerBytes"]): Promise<LocalImage> {
    this.core.disk.require("a pull");
    return this.core.images.pull(reference, log, onLayerBytes);
  }

  /** Whether a spawn that names `name` before it exists gets it built (a system image, on a server running as root). */
  canBuild(name: string): boolean {
    return this.core.images.canBuild(name);
  }

  /** Builds one of the server's own images (what a spawn of it does first); concurrent calls share the build. */
  build(name: string): Promise<LocalImage> {
    this.core.disk.require("an image build");
    return this.core.images.build(name);
  }

  /** Imports an image from an OCI layout directory, an OCI archive or a `docker save` tarball on this host. */
  async import(source: string, opts: ImportOptions = {}): Promise<LocalImage> {
    this.core.disk.require("an image import");
    return this.core.images.import(source, opts);
  }

  /** Imports an image from an uploaded archive (OCI archive, docker save or docker-archive tarball). */
  async importStream(archive: AsyncIterable<Uint8Array> | NodeJS.ReadableStream, opts: ImportOptions = {}): Promise<LocalImage> {
    this.core.disk.require("an image import");
    return this.core.images.importStream(archive, opts);
  }

  /** Starts pulling an image and returns the job at once; its progress and outcome are kept for an hour. */
  /** The size an image says its sandboxes need (the desktop image's 2 GiB and two vCPUs); null when it says none or is not local. */
  async sandboxSize(name: string): Promise<ImageSize | null> {
    return resolveImage(this.core.paths, name).then(
      (i) => i.sandboxSize ?? null,
      () => null,
    );
  }

  startPull(reference: string): PullJob {
    this.core.disk.require("a pull");
    parseImageReference(reference);
    return this.pullJobs.start(reference);
  }

  /** A pull job by id. */
  pullJob(id: string): PullJob {
    return this.pullJobs.get(id);
  }

  /** The name an image reference is stored under ("alpine" → "docker.io/library/alpine:latest"). */
  canonicalName(reference: string): string {
    return canonicalName(reference);
  }

  /** Local images, and whether a live sandbox uses each. */
  async list(): Promise<ImageInfo[]> {
    const used = new Set(this.hooks.sandboxes.list().map((s) => s.image));
    return (await listImages(this.core.paths)).map((i) => imageInfo(i, used.has(i.name)));
  }

  /** Removes a local image; refused while a sandbox or a kept snapshot uses it. */
  async remove(name: string): Promise<void> {
    return this.core.images.remove(name);
  }

  /** Makes a new image from a running sandbox's disk: one layer on top of its image (or all in one with `squash`). */
  async commit(id: string, opts: CommitOptions): Promise<CommitResult> {
    this.core.disk.require("a commit");
    return commit(this.core, this.work(), this.hooks.sandboxes.idOf(id), opts);
  }

  /** An image as an OCI archive stream (manifest and layers as stored), with a file name for it. */
  async export(name: string, log?: (m: string) => void): Promise<{ stream: Readable; filename: string; digest: string }> {
    return exportImage(this.core, this.work(), name, log);
  }

  /** Pushes a local image to a registry (`reference`, default its own name); blobs the registry has are skipped or mounted. */
  async push(name: string, reference?: string, log?: (m: string) => void, onBlob?: (b: PushedBlob) => void, login?: Credentials): Promise<PushResult> {
    return pushImage(this.core, this.work(), name, reference, log, onBlob, login);
  }

  /** Deletes blobs that no local image refers to; returns how many. */
  async pruneBlobs(): Promise<number> {
    return this.core.images.pruneBlobs();
  }

  /** What commits, exports, pushes and builds need beyond the image store: throwaway sandboxes, and who uses an image. */
  work(): ImageWork {
    return {
      blobs: this.hooks.blobs,
      spawnHelper: this.hooks.spawnHelper,
      destroyHelper: this.hooks.destroy,
      imageUsers: (image) => [
        ...this.hooks.sandboxes
          .list(undefined, ["creating", "running", "paused", "stopped", "created"])
          .filter((r) => r.image === image)
          .map((r) => r.id),
        ...this.core.snapshotRows
          .list(["ready"])
          .filter((r) => r.image === image && r.kind !== "base")
          .map((r) => r.name ?? r.id),
      ],
    };
  }
}
