// An image's OCI form (manifest, config, layers as blobs) and its file index, made when missing.
// Pulled and committed images keep theirs; an image built here (the built-in one) or pulled
// before manifests were kept gets them once: its layers are hashed again, or a throwaway sandbox
// of the image is scanned and its whole filesystem becomes the first layer.
import { stat } from "node:fs/promises";
import type { BlobStore } from "../../images/blobs.js";
import { diffFiles, indexOf, loadIndex, saveIndex, type FileIndex } from "../../images/file-index.js";
import { layerStream, updateImageMeta } from "../../images/install.js";
import { childConfig, diffIdOf, readStoredImage, storeImage, storeLayer, type StoredImage } from "../../images/oci-build.js";
import type { LocalImage } from "../../images/store.js";
import { conflict } from "../../http/errors.js";
import { layerTar, type LayerCounts } from "../guest/guest-layer.js";
import { scanGuest } from "../guest/guest-scan.js";
import type { Sandbox } from "../guest/sandbox.js";
import { ignore } from "../../util/ignore.js";

/** What image operations need beyond the image store: throwaway sandboxes, and who uses an image. */
export interface ImageWork {
  blobs: BlobStore;
  spawnHelper: (image: string) => Promise<Sandbox>;
  destroyHelper: (id: string) => Promise<void>;
  /** Live sandboxes and kept snapshots using an image (an image in use is not replaced). */
  imageUsers: (image: string) => string[];
}

/**
 * An image's manifest and config from the blob store, made first when missing, and the index of
 * its files; a throwaway sandbox of the image is spawned for whichever is not known yet.
 */
export async function imageLayers(deps: ImageWork, image: LocalImage, log: (m: string) => void, wantIndex: boolean): Promise<{ parent: StoredImage; index: FileIndex | null }> {
  // Two commits or pushes of one image at once share the throwaway sandbox.
  const key = `${image.dir}|${wantIndex}`;
  const running = inFlight.get(key);
  if (running) return running;
  const p = learnImage(deps, image, log, wantIndex).finally(() => inFlight.delete(key));
  inFlight.set(key, p);
  return p;
}

const inFlight = new Map<string, Promise<{ parent: StoredImage; index: FileIndex | null }>>();

async function learnImage(deps: ImageWork, image: LocalImage, log: (m: string) => void, wantIndex: boolean): Promise<{ parent: StoredImage; index: FileIndex | null }> {
  let parent = image.digest && image.configDigest ? await readStoredImage(deps.blobs, image.digest) : null;
  let index = wantIndex ? await loadIndex(image.dir) : null;
  if (!parent && image.layers?.length) {
    parent = await synthesizeManifest(deps.blobs, image);
    await updateImageMeta(image.dir, { ...metaOf(image), digest: parent.manifestDigest, configDigest: parent.configDigest });
  }
  if (parent && (index || !wantIndex)) return { parent, index };
  log(`learning the files of ${image.name} from a throwaway sandbox`);
  const helper = await deps.spawnHelper(image.name);
  try {
    const scanned = await scanGuest(helper);
    index = indexOf(scanned);
    if (!parent) {
      // An image with no layers of its own (built here): its whole filesystem becomes its first layer.
      const counts: LayerCounts = { entries: 0, whiteouts: 0 };
      const layer = await storeLayer(deps.blobs, layerTar(helper, diffFiles(null, scanned).changed, [], counts));
      log(`${image.name}: base layer of ${counts.entries} entries, ${layer.descriptor.size} bytes`);
      const configDoc = childConfig(baseConfigDoc(image), { diffId: layer.diffId, createdBy: image.source });
      parent = await storeImage(deps.blobs, configDoc, [layer.descriptor]);
      await updateImageMeta(image.dir, { ...metaOf(image), digest: parent.manifestDigest, configDigest: parent.configDigest, layers: [layer.descriptor.digest] });
    }
    await saveIndex(image.dir, index);
  } finally {
    await deps.destroyHelper(helper.id).catch(ignore("the helper may be gone already"));
  }
  return { parent, index };
}

// Images pulled before manifests were kept: a manifest and config made again from the layers
// (their diff ids are the hashes of the uncompressed tars) and the config fields we kept.
async function synthesizeManifest(blobs: BlobStore, image: LocalImage): Promise<StoredImage> {
  const layers = [];
  const diffIds: string[] = [];
  for (const digest of image.layers ?? []) {
    const st = await stat(blobs.path(digest)).catch(() => null);
    if (!st) throw conflict(`layer ${digest} of ${image.name} is no longer in the blob store: pull the image again`);
    diffIds.push(await diffIdOf(await layerStream(blobs.path(digest), "")));
    layers.push({ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest, size: st.size });
  }
  const doc = { ...baseConfigDoc(image), rootfs: { type: "layers", diff_ids: diffIds }, history: [] };
  return storeImage(blobs, doc, layers);
}

/** The metadata of an installed image, without where it lives. */
export function metaOf(image: LocalImage) {
  const { dir: _d, rootfs: _r, ...meta } = image;
  return meta;
}

/** A config doc for an image that has none stored: the fields we kept from its config. */
export function baseConfigDoc(image: LocalImage): any {
  const c = image.config ?? {};
  return { architecture: "amd64", os: "linux", config: { ...c } };
}
