// Local images: pulls from registries, imports from archives and layouts, removal and blob
// pruning. Every interface reaches these through Forge (pullImage, importImage, removeImage,
// pruneBlobs); spawns pull a missing image through the same path.
import { randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { readdir, rm, stat } from "node:fs/promises";
import { pipeline } from "node:stream/promises";
import { join } from "node:path";
import type { Paths } from "../../config/paths.js";
import { importArchive } from "../../images/archive.js";
import type { BuiltInImages } from "../../images/built-in.js";
import { DigestMismatchError, type BlobStore } from "../../images/blobs.js";
import { LayerError } from "../../images/flatten.js";
import { installImage } from "../../images/install.js";
import { ImageFormatError } from "../../images/oci.js";
import { importOciLayout } from "../../images/oci-layout.js";
import type { ImageReference } from "../../images/reference.js";
import { familiarName, parseImageReference } from "./image-reference.js";
import { PullError, RegistryClient, dockerConfigCredentials, type Credentials, type RegistryOptions } from "../../images/registry.js";
import { DEFAULT_IMAGE, ImageNotFoundError, canonicalName, listImages, resolveImage, type LocalImage } from "../../images/store.js";
import { TarError } from "../../util/tar-read.js";
import { badRequest, conflict, ForgevmError, notFound } from "../../http/errors.js";
import type { EventBus } from "../events.js";

export interface ImageDeps {
  paths: Paths;
  blobs: BlobStore;
  events: EventBus;
  /** Registry logins from the config, by registry host; ~/.docker/config.json is the fallback. */
  registryAuth?: Record<string, Credentials>;
  /** What the server builds itself (system images) when a spawn first names one. */
  builtIn?: BuiltInImages;
  /** Live sandboxes running this image. */
  sandboxesUsing: (image: string) => string[];
  /** Kept snapshots made from this image (their disks are backed by it). */
  snapshotsUsing: (image: string) => string[];
  /** Drops the base snapshots of this image. */
  dropBases: (image: string) => Promise<void>;
  /** Blobs kept although no image lists them (the build cache's layers). */
  keepBlobs?: () => Promise<string[]>;
}

export interface ImportOptions {
  /** The name to store it under; default: the name a docker save archive carries. */
  name?: string;
  /** The tag of the stored image (replacing the name's own). */
  tag?: string;
  /** Which image of several in the source: a tag, RepoTag or OCI ref name. */
  ref?: string;
  log?: (m: string) => void;
  /** How messages call the source (default: its path). */
  label?: string;
}

export { parseImageReference };

/** `name` with its tag set to `tag` (a registry's port is not a tag). */
export function withTag(name: string, tag: string): string {
  const at = name.indexOf("@");
  const bare = at >= 0 ? name.slice(0, at) : name;
  const colon = bare.lastIndexOf(":");
  return `${colon > bare.lastIndexOf("/") ? bare.slice(0, colon) : bare}:${tag}`;
}

export class Images {
  private readonly pulls = new Map<string, Promise<LocalImage>>();
  private readonly builds = new Map<string, Promise<LocalImage>>();
  private readonly credentials = async (registry: string) => this.d.registryAuth?.[registry] ?? dockerConfigCredentials(registry);

  constructor(private readonly d: ImageDeps) {}

  /** Pulls an image from its registry (verifying every byte) and installs it; concurrent pulls of one image share the work. */
  pull(reference: string, log?: (m: string) => void, onLayerBytes?: RegistryOptions["onLayerBytes"]): Promise<LocalImage> {
    let ref: ImageReference;
    try {
      ref = parseImageReference(reference);
    } catch (e) {
      return Promise.reject(e);
    }
    const running = this.pulls.get(ref.canonical);
    if (running) return running;
    const { paths, blobs, events } = this.d;
    const p = (async () => {
      events.emit("image.pulling", null, { image: ref.canonical });
      // Progress goes to the caller and out as events, so an API client waiting on a spawn sees it.
      const progress = (m: string) => {
        log?.(m);
        events.emit("image.progress", null, { image: ref.canonical, message: m });
      };
      try {
        const r = await new RegistryClient({ log: progress, onLayerBytes, credentials: this.credentials }).pull(ref, blobs);
        await installImage(paths, blobs, { name: ref.canonical, source: ref.canonical, ...r }, progress);
      } catch (e) {
        throw pullFailure(e, ref);
      }
      events.emit("image.pulled", null, { image: ref.canonical });
      return resolveImage(paths, ref.canonical);
    })().finally(() => this.pulls.delete(ref.canonical));
    this.pulls.set(ref.canonical, p);
    return p;
  }

  /** Whether a spawn that names `name` before it exists gets it built here (a system image, on a server running as root). */
  canBuild(name: string): boolean {
    return !!this.d.builtIn?.canBuild(canonicalName(name));
  }

  /** Builds one of the server's own images (concurrent spawns of it share the build), saying each step as events and on the server's log. */
  build(name: string): Promise<LocalImage> {
    const image = canonicalName(name);
    const running = this.builds.get(image);
    if (running) return running;
    const { builtIn, events, paths } = this.d;
    if (!builtIn?.canBuild(image)) return Promise.reject(new ForgevmError("BAD_REQUEST", `image: ${image} is not one this server builds`));
    const p = (async () => {
      events.emit("image.building", null, { image });
      const progress = (m: string) => {
        console.error(`forgevm: ${m}`);
        events.emit("image.progress", null, { image, message: m });
      };
      try {
        await builtIn.build(image, progress);
      } catch (e) {
        throw new ForgevmError("UNAVAILABLE", `image ${image} could not be built: ${(e as Error).message}`);
      }
      events.emit("image.built", null, { image });
      return resolveImage(paths, image);
    })().finally(() => this.builds.delete(image));
    this.builds.set(image, p);
    return p;
  }

  /** A registry client with the credentials pulls use (the config's, else ~/.docker/config.json). */
  registryClient(log?: (m: string) => void, login?: Credentials): RegistryClient {
    return new RegistryClient({ log, credentials: login ? async () => login : this.credentials });
  }

  /**
   * Imports an image from an OCI layout directory, an OCI archive or a `docker save` tarball.
   * `name` names the result (a docker save tarball carries its own), `tag` sets its tag, `ref`
   * picks one image of several in the source.
   */
  async import(source: string, o: ImportOptions = {}): Promise<LocalImage> {
    const { paths, blobs } = this.d;
    const st = await stat(source).catch(() => null);
    if (!st) throw badRequest(`${source} does not exist`);
    const nameOf = (carried?: string) => {
      const base = o.name ?? carried;
      if (!base) throw badRequest(`name: the image in ${o.label ?? source} carries no name of its own; give it one (--name)`);
      return canonicalName(o.tag ? withTag(base, o.tag) : base);
    };
    try {
      const meta = st.isDirectory()
        ? await importOciLayout(paths, blobs, source, nameOf(), o.ref, o.log)
        : await importArchive(paths, blobs, source, nameOf, o.ref, o.log, paths.dataDir);
      this.d.events.emit("image.imported", null, { image: meta.name });
      return await resolveImage(paths, meta.name);
    } catch (e) {
      if (e instanceof ForgevmError || e instanceof DigestMismatchError || e instanceof LayerError) throw e;
      // An upload's file is ours, in the data directory: the caller knows it as its label.
      if (e instanceof ImageFormatError || e instanceof TarError) throw badRequest(o.label ? e.message.replaceAll(source, o.label) : e.message);
      throw e;
    }
  }

  /** Imports an uploaded archive: kept in the data directory while it is read, then removed. */
  async importStream(archive: AsyncIterable<Uint8Array> | NodeJS.ReadableStream, o: ImportOptions = {}): Promise<LocalImage> {
    const file = join(this.d.paths.dataDir, `.import-${randomBytes(6).toString("hex")}.tar`);
    try {
      await pipeline(archive as NodeJS.ReadableStream, createWriteStream(file, { mode: 0o600 }));
      return await this.import(file, { ...o, label: o.label ?? "the uploaded archive" });
    } finally {
      await rm(file, { force: true });
    }
  }

  /** Removes a local image; refused while a live sandbox or a kept snapshot uses it. */
  async remove(name: string): Promise<void> {
    const image = await resolveImage(this.d.paths, name).catch((e) => {
      throw e instanceof ImageNotFoundError ? notFound(e.message) : e;
    });
    if (image.name === DEFAULT_IMAGE) throw conflict(`${DEFAULT_IMAGE} is the built-in default image; ./setup.sh builds it`);
    const users = this.d.sandboxesUsing(image.name);
    if (users.length) throw conflict(`image ${image.name} is in use by ${users.join(", ")}`);
    const snaps = this.d.snapshotsUsing(image.name);
    if (snaps.length) throw conflict(`image ${image.name} is used by snapshots ${snaps.join(", ")} (delete them first)`);
    await this.d.dropBases(image.name);
    await rm(image.dir, { recursive: true, force: true });
  }

  /** Deletes blobs that no local image refers to; returns how many. */
  async pruneBlobs(): Promise<number> {
    const { paths } = this.d;
    const used = new Set((await listImages(paths)).flatMap((i) => [...(i.layers ?? []), ...(i.configDigest && i.digest ? [i.digest, i.configDigest] : [])]).map((d) => d.slice(7)));
    let removed = 0;
    for (const f of await readdir(join(paths.blobsDir, "sha256")).catch(() => [])) {
      if (used.has(f)) continue;
      await rm(join(paths.blobsDir, "sha256", f), { force: true });
      removed++;
    }
    return removed;
  }
}

/** A failed pull or push as the error interfaces report: unreachable registry 503, unknown image 404, refused or bad content 400. */
export function pullFailure(e: unknown, ref: ImageReference): Error {
  if (e instanceof ForgevmError) return e;
  const msg = `image ${familiarName(ref.canonical)}: ${(e as Error).message}`;
  if (e instanceof PullError) {
    if (e.kind === "unreachable") return new ForgevmError("UNAVAILABLE", msg);
    if (e.kind === "not_found") return notFound(msg);
  }
  if (e instanceof PullError || e instanceof DigestMismatchError || e instanceof ImageFormatError || e instanceof LayerError || e instanceof TarError) return badRequest(msg);
  return e as Error;
}
