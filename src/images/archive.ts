// Importing image archives: `docker save` tarballs (the classic manifest.json form and the OCI
// form newer Dockers write) and OCI archives (a tarred OCI layout). The archive is unpacked into
// a private temporary directory — regular files and directories only — then imported.
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, posix } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { Paths } from "../config/paths.js";
import type { BlobStore } from "./blobs.js";
import { archiveComponents } from "./flatten.js";
import { installImage } from "./install.js";
import { importOciLayout } from "./oci-layout.js";
import { ImageFormatError, parseImageConfig, sha256, type Manifest } from "./oci.js";
import type { ImageMeta } from "./store.js";
import { readTar } from "../util/tar-read.js";

const DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar";

/** Links an archive holds (its own path → the path it points to, both inside the archive). */
type Links = Map<string, string>;

// Files and directories are unpacked; links (skopeo's docker-archive writes `<id>/layer.tar`
// as a symlink to `<digest>.tar`, docker save may hard-link duplicate layers) are recorded and
// followed only to files inside the archive.
async function unpack(archive: string, into: string): Promise<Links> {
  const links: Links = new Map();
  for await (const { entry, body } of readTar(createReadStream(archive))) {
    const comps = archiveComponents(entry.path);
    if (!comps.length) continue;
    const dest = join(into, ...comps);
    if (entry.type === "dir") await mkdir(dest, { recursive: true });
    else if (entry.type === "file") {
      await mkdir(dirname(dest), { recursive: true });
      await pipeline(Readable.from(body), createWriteStream(dest, { flags: "wx" }));
    } else if (entry.type === "symlink" || entry.type === "hardlink") {
      const target = entry.type === "symlink" ? posix.join(posix.dirname(comps.join("/")), entry.linkname) : entry.linkname;
      if (entry.linkname.startsWith("/") || posix.normalize(target).startsWith("..")) {
        throw new ImageFormatError(`image archive entry ${entry.path} is a link to ${entry.linkname}, outside the archive`);
      }
      links.set(comps.join("/"), posix.normalize(target));
    }
  }
  return links;
}

/** The file an archive path names, following the archive's own links. */
function inArchive(dir: string, links: Links, path: string): string {
  let p = archiveComponents(path).join("/");
  for (let hops = 0; links.has(p); hops++) {
    if (hops > 16) throw new ImageFormatError(`image archive path ${path} is a loop of links`);
    p = links.get(p)!;
  }
  return join(dir, ...archiveComponents(p));
}

async function exists(p: string): Promise<boolean> {
  return stat(p).then(
    () => true,
    () => false,
  );
}

/**
 * Imports from an archive file. `nameOf` gets the name the archive carries (a docker save
 * tarball's RepoTag; none for an OCI archive) and returns the one to store it under. `ref`
 * picks one image of several (a RepoTag, a tag, or an OCI ref name).
 */
export async function importArchive(
  paths: Paths,
  blobs: BlobStore,
  archive: string,
  nameOf: (carried?: string) => string,
  ref?: string,
  log?: (m: string) => void,
  workDir = tmpdir(),
): Promise<ImageMeta> {
  const dir = await mkdtemp(join(workDir, "forgevm-import-"));
  try {
    const links = await unpack(archive, dir);
    const hasLayout = await exists(join(dir, "index.json"));
    const hasDockerManifest = await exists(join(dir, "manifest.json"));
    if (hasDockerManifest) {
      const entries = JSON.parse(await readFile(join(dir, "manifest.json"), "utf8")) as { Config?: string; RepoTags?: string[]; Layers?: string[] }[];
      if (!Array.isArray(entries) || !entries.length) throw new ImageFormatError("manifest.json in the archive lists no images");
      const pick = ref ? entries.find((e) => e.RepoTags?.includes(ref) || e.RepoTags?.some((t) => t.endsWith(`:${ref}`))) : entries[0];
      if (!pick) throw new ImageFormatError(`no image tagged "${ref}" in ${archive} (tags: ${entries.flatMap((e) => e.RepoTags ?? []).join(", ")})`);
      const imageName = nameOf(pick.RepoTags?.[0]);
      // Docker 25 and ours write both: the OCI index keeps the manifest's own bytes (and digest).
      if (hasLayout && entries.length === 1) return await importOciLayout(paths, blobs, dir, imageName, undefined, log);
      if (typeof pick.Config !== "string" || !Array.isArray(pick.Layers)) throw new ImageFormatError("manifest.json entry has no Config or Layers");
      const configBytes = await readFile(inArchive(dir, links, pick.Config));
      const layers = [];
      for (const l of pick.Layers) {
        const file = inArchive(dir, links, l);
        const digest = sha256(await readFile(file));
        await blobs.put(digest, createReadStream(file), (await stat(file)).size, `layer ${l}`);
        layers.push({ mediaType: DOCKER_LAYER, digest, size: (await stat(file)).size });
      }
      const config = { mediaType: "application/vnd.docker.container.image.v1+json", digest: sha256(configBytes), size: configBytes.length };
      const manifest: Manifest = { mediaType: "application/vnd.docker.distribution.manifest.v2+json", config, layers };
      const manifestBytes = Buffer.from(JSON.stringify({ schemaVersion: 2, ...manifest }));
      const manifestDigest = sha256(manifestBytes);
      return installImage(
        paths,
        blobs,
        { name: imageName, source: `docker-archive:${archive}`, manifestDigest, manifest, config: parseImageConfig(configBytes), manifestBytes, configBytes },
        log,
      );
    }
    if (hasLayout) return await importOciLayout(paths, blobs, dir, nameOf(), ref, log);
    throw new ImageFormatError(`${archive} is neither a docker save tarball (manifest.json) nor an OCI archive (index.json)`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
