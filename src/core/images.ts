// Local images: pulls from registries, imports from archives and layouts, removal and blob
// pruning. Every interface reaches these through Forge (pullImage, importImage, removeImage,
// pruneBlobs); spawns pull a missing image through the same path.
import { readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Paths } from "../config/paths.js";
import { importArchive } from "../images/archive.js";
import { DigestMismatchError, type BlobStore } from "../images/blobs.js";
import { LayerError } from "../images/flatten.js";
import { installImage } from "../images/install.js";
import { ImageFormatError } from "../images/oci.js";
import { importOciLayout } from "../images/oci-layout.js";
import { parseReference, type ImageReference } from "../images/reference.js";
import { PullError, RegistryClient, dockerConfigCredentials, type Credentials, type RegistryOptions } from "../images/registry.js";
import { DEFAULT_IMAGE, ImageNotFoundError, canonicalName, listImages, resolveImage, type LocalImage } from "../images/store.js";
import { TarError } from "../images/tar.js";
import { badRequest, conflict, ForgevmError, notFound } from "./errors.js";
import type { EventBus } from "./events.js";

export interface ImageDeps {
  paths: Paths;
  blobs: BlobStore;
  events: EventBus;
  /** Registry logins from the config, by registry host; ~/.docker/config.json is the fallback. */
  registryAuth?: Record<string, Credentials>;
  /** Live sandboxes running this image. */
  sandboxesUsing: (image: string) => string[];
  /** Kept snapshots made from this image (their disks are backed by it). */
  snapshotsUsing: (image: string) => string[];
  /** Drops the base snapshots of this image. */
  dropBases: (image: string) => Promise<void>;
}

export class Images {
  private readonly pulls = new Map<string, Promise<LocalImage>>();
  private readonly credentials = async (registry: string) => this.d.registryAuth?.[registry] ?? dockerConfigCredentials(registry);

  constructor(private readonly d: ImageDeps) {}

  /** Pulls an image from its registry (verifying every byte) and installs it; concurrent pulls of one image share the work. */
  pull(reference: string, log?: (m: string) => void, onLayerBytes?: RegistryOptions["onLayerBytes"]): Promise<LocalImage> {
    let ref: ImageReference;
    try {
      ref = parseReference(reference);
    } catch (e) {
      return Promise.reject(badRequest(`image: ${(e as Error).message}`));
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

  /**
   * Imports an image from an OCI layout directory, an OCI archive or a `docker save` tarball.
   * `name` may be left out for a docker save tarball, which carries its own tag.
   */
  async import(source: string, name?: string, tag?: string, log?: (m: string) => void): Promise<LocalImage> {
    const { paths, blobs } = this.d;
    const st = await stat(source).catch(() => null);
    if (!st) throw badRequest(`${source} does not exist`);
    try {
      if (st.isDirectory()) {
        if (!name) throw badRequest("importing an OCI layout directory needs a name");
        const meta = await importOciLayout(paths, blobs, source, canonicalName(name), tag, log);
        return await resolveImage(paths, meta.name);
      }
      const meta = await importArchive(paths, blobs, source, canonicalName, name, tag, log);
      return await resolveImage(paths, meta.name);
    } catch (e) {
      if (e instanceof ForgevmError || e instanceof DigestMismatchError || e instanceof LayerError) throw e;
      if (e instanceof ImageFormatError || e instanceof TarError) throw badRequest(e.message);
      throw e;
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
    const used = new Set((await listImages(paths)).flatMap((i) => i.layers ?? []).map((d) => d.slice(7)));
    let removed = 0;
    for (const f of await readdir(join(paths.blobsDir, "sha256")).catch(() => [])) {
      if (used.has(f)) continue;
      await rm(join(paths.blobsDir, "sha256", f), { force: true });
      removed++;
    }
    return removed;
  }
}

/** A failed pull as the error interfaces report: unreachable registry 503, unknown image 404, bad content 400. */
function pullFailure(e: unknown, ref: ImageReference): Error {
  if (e instanceof ForgevmError) return e;
  const msg = `image ${ref.canonical}: ${(e as Error).message}`;
  if (e instanceof PullError) {
    if (e.kind === "unreachable") return new ForgevmError("UNAVAILABLE", msg);
    if (e.kind === "not_found") return notFound(msg);
  }
  if (e instanceof PullError || e instanceof DigestMismatchError || e instanceof ImageFormatError || e instanceof LayerError || e instanceof TarError) return badRequest(msg);
  return e as Error;
}
