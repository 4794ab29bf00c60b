// Images out of this host: an OCI archive of a local image (export) and a push to a registry.
// Both send the stored manifest, config and layers, made first for an image that has none
// (image-layers.ts).
import type { Readable } from "node:stream";
import { exportArchive } from "../../images/oci-export.js";
import { MEDIA } from "../../images/oci.js";
import { parseReference, DOCKER_HUB } from "../../images/reference.js";
import type { Credentials } from "../../images/registry.js";
import { pushImage as pushToRegistry, type PushedBlob, type PushResult } from "../../images/registry-push.js";
import { ImageNotFoundError, resolveImage, type LocalImage } from "../../images/store.js";
import type { Paths } from "../../config/paths.js";
import type { EventBus } from "../events.js";
import type { Images } from "./images.js";
import { notFound } from "../../http/errors.js";
import { updateImageMeta } from "../../images/install.js";
import { imageLayers, metaOf, type ImageWork } from "./image-layers.js";
import { parseImageReference, pullFailure } from "./images.js";

export type { PushResult, PushedBlob };

/** What an export or a push takes: where images live, where their events go, and (a push) the registry client. */
export interface TransferDeps {
  readonly paths: Paths;
  readonly events: Pick<EventBus, "emit">;
  readonly images: Pick<Images, "registryClient">;
}

async function localImage(core: Pick<TransferDeps, "paths">, name: string): Promise<LocalImage> {
  return resolveImage(core.paths, name).catch((e) => {
    throw e instanceof ImageNotFoundError ? notFound(e.message) : e;
  });
}

/** The name Docker shows for a stored name: "myapp:v1" for Docker Hub's library, else the name. */
export function familiarName(name: string): string {
  return name.replace(`${DOCKER_HUB}/library/`, "").replace(`${DOCKER_HUB}/`, "");
}

/** An image as an OCI archive (a stream), with the file name it is offered under. */
export async function exportImage(
  core: TransferDeps,
  work: ImageWork,
  name: string,
  log: (m: string) => void = () => {},
): Promise<{ stream: Readable; filename: string; digest: string }> {
  const image = await localImage(core, name);
  const { parent } = await imageLayers(work, image, log, false);
  let tag = "latest";
  try {
    tag = parseReference(image.name).tag ?? "latest";
  } catch {
    // a local name that is no registry reference keeps "latest"
  }
  const familiar = familiarName(image.name);
  core.events.emit("image.exported", null, { image: image.name, digest: parent.manifestDigest });
  return {
    stream: exportArchive(work.blobs, { image: parent, tag, name: image.name, familiar }),
    filename: `${familiar.replace(/[^A-Za-z0-9._-]+/g, "_")}.tar`,
    digest: parent.manifestDigest,
  };
}

/** Pushes a local image to `reference` (default: its own name) with the credentials pulls use. */
export async function pushImage(
  core: TransferDeps,
  work: ImageWork,
  name: string,
  reference: string | undefined,
  log: (m: string) => void = () => {},
  onBlob?: (b: PushedBlob) => void,
  /** A login for this push instead of the configured ones. */
  login?: Credentials,
): Promise<PushResult> {
  const image = await localImage(core, name);
  const ref = parseImageReference(reference ?? image.name);
  const { parent } = await imageLayers(work, image, log, false);
  // Repositories of the same registry this image or its ancestors came from may hold its blobs.
  const mountFrom: string[] = [];
  let cur: LocalImage | null = image;
  for (let depth = 0; cur && depth < 8; depth++) {
    try {
      const src = parseReference(cur.source);
      if (src.registry === ref.registry) mountFrom.push(src.repository);
    } catch {
      // a file or a commit: nothing to mount from
    }
    for (const repo of cur.pushedTo ?? []) if (repo.startsWith(`${ref.registry}/`)) mountFrom.push(repo.slice(ref.registry.length + 1));
    cur = cur.parent ? await resolveImage(core.paths, cur.parent).catch(() => null) : null;
  }
  try {
    const result = await pushToRegistry(
      core.images.registryClient(log, login),
      work.blobs,
      {
        ref,
        manifestBytes: parent.manifestBytes,
        manifestMediaType: parent.manifest.mediaType || MEDIA.ociManifest,
        manifestDigest: parent.manifestDigest,
        blobs: [parent.manifest.config, ...parent.manifest.layers],
        mountFrom: [...new Set(mountFrom)],
      },
      (b) => {
        log(`${b.digest.slice(7, 19)}: ${b.status} (${b.size} bytes)`);
        onBlob?.(b);
      },
    );
    const here = `${ref.registry}/${ref.repository}`;
    const now = await resolveImage(core.paths, image.name); // its layers may have been made meanwhile
    if (!now.pushedTo?.includes(here)) await updateImageMeta(now.dir, { ...metaOf(now), pushedTo: [...(now.pushedTo ?? []), here].slice(-20) });
    core.events.emit("image.pushed", null, { image: image.name, reference: ref.canonical, digest: result.digest });
    return result;
  } catch (e) {
    throw pullFailure(e, ref);
  }
}
