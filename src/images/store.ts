// The local image store: each image is a directory holding a read-only ext4 root filesystem
// and its metadata. Image pulls and imports (later) install into the same layout.
import { readFile, readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Paths } from "../config/paths.js";
import { familiarName, parseReference } from "./reference.js";

/** The image a spawn gets when none is named: Debian bookworm minbase with python3 and bash. */
export const DEFAULT_IMAGE = "forgevm/debian:bookworm";
/** The default image plus what code contexts use most: matplotlib (charts), pandas, Node.js (E2B's code-interpreter-v1). */
export const CODE_IMAGE = "forgevm/code-interpreter:bookworm";
/** The system image (docs/system-images.md): Debian 12 booted by systemd, with sshd and journald. */
export const SYSTEM_IMAGE = "forgevm/system:debian-12";
/** The desktop image (docs/desktop.md): the system image with a running XFCE desktop, Firefox and the tools to drive them. */
export const DESKTOP_IMAGE = "forgevm/desktop:bookworm";

export interface ImageMeta {
  name: string;
  /** How it was made, e.g. "debootstrap bookworm minbase". */
  source: string;
  createdAt: string;
  /** Size of rootfs.ext4 in bytes. */
  size: number;
  /** Packages or layers it contains, informational. */
  description?: string;
  /** Manifest digest, for images pulled or imported from OCI sources. */
  digest?: string;
  layers?: string[];
  /** Config blob digest: set when the manifest and config are in the blob store. */
  configDigest?: string;
  /** The image a commit made this one from. */
  parent?: string;
  /** Repositories ("registry/repository") it was pushed to: a later push there or beside it mounts its blobs. */
  pushedTo?: string[];
  /** Env, working directory, user, entrypoint and cmd from the image config. */
  config?: import("./oci.js").ImageConfig;
  /** "systemd": a system image, which boots systemd as init with the agent as its service (docs/system-images.md). */
  init?: "systemd";
  /** The size a sandbox of it gets when neither its spawn nor its template says (the desktop image: 2 GiB, two vCPUs). */
  sandboxSize?: ImageSize;
}

/** An image's own idea of the machine it needs. */
export interface ImageSize {
  memoryMb: number;
  vcpus: number;
}

/** What a sandbox of this image boots as init when its spawn does not say: systemd, or the agent itself (null). */
export function imageInit(image: ImageMeta): "systemd" | null {
  return image.init ?? image.config?.Init ?? null;
}

export interface LocalImage extends ImageMeta {
  dir: string;
  rootfs: string;
}

export class ImageNotFoundError extends Error {
  override name = "ImageNotFoundError";
}

/**
 * The name an image is stored under: the canonical registry reference for anything that parses
 * as one (so "alpine" and "docker.io/library/alpine:latest" are the same image), else the name.
 */
export function canonicalName(name: string): string {
  if (name === DEFAULT_IMAGE || name.startsWith("forgevm/")) return name;
  try {
    return parseReference(name).canonical;
  } catch {
    return name;
  }
}

/**
 * Directory name of an image: its name with every byte outside [A-Za-z0-9._-] written as %HH, so
 * no two names share a directory ("a/b" and "a_b" did when both became "a_b").
 */
export function imageSlug(name: string): string {
  return [...Buffer.from(name, "utf8")].map((b) => (/[A-Za-z0-9._-]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `%${b.toString(16).padStart(2, "0")}`)).join("");
}

/** The directory earlier releases kept an image in ("_" for every other character): read, never written. */
function legacySlug(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]/g, "_");
}

/** Where an image named `name` is written. */
export function imageDir(paths: Paths, name: string): string {
  return join(paths.imagesDir, imageSlug(name));
}

/**
 * Where an image named `name` is kept: its own directory, or one an earlier release made for it
 * (only when that one's metadata names this very image), else where it would be written.
 */
export async function storedImageDir(paths: Paths, name: string): Promise<string> {
  const dir = imageDir(paths, name);
  if (await stat(join(dir, "image.json")).catch(() => null)) return dir;
  const legacy = join(paths.imagesDir, legacySlug(name));
  const meta = await readFile(join(legacy, "image.json"), "utf8").then(
    (t) => JSON.parse(t) as ImageMeta,
    () => null,
  );
  return meta?.name === name ? legacy : dir;
}

/** Finds a local image by name ("default" means DEFAULT_IMAGE). */
export async function resolveImage(paths: Paths, name: string = DEFAULT_IMAGE): Promise<LocalImage> {
  const wanted = name === "default" ? DEFAULT_IMAGE : name;
  const dir = await storedImageDir(paths, canonicalName(wanted));
  try {
    const meta = JSON.parse(await readFile(join(dir, "image.json"), "utf8")) as ImageMeta;
    const rootfs = join(dir, "rootfs.ext4");
    await stat(rootfs);
    return { ...meta, dir, rootfs };
  } catch {
    const canonical = canonicalName(wanted);
    const hint =
      wanted === DEFAULT_IMAGE
        ? "run ./setup.sh to build it"
        : canonical === DESKTOP_IMAGE || canonical === SYSTEM_IMAGE
          ? `build it on the server's machine: sudo forgevm image system ${canonical === DESKTOP_IMAGE ? "desktop" : "debian-12"} (a few minutes, from Debian's archive)`
          : `local images: ${(await listImages(paths)).map((i) => familiarName(i.name)).join(", ") || "none"}`;
    throw new ImageNotFoundError(`image "${familiarName(wanted)}" is not in ${paths.imagesDir} (${hint})`);
  }
}

/** All complete images in the store. */
export async function listImages(paths: Paths): Promise<LocalImage[]> {
  let names: string[];
  try {
    names = await readdir(paths.imagesDir);
  } catch {
    return [];
  }
  const out = new Map<string, LocalImage>();
  for (const n of names) {
    const dir = join(paths.imagesDir, n);
    try {
      const meta = JSON.parse(await readFile(join(dir, "image.json"), "utf8")) as ImageMeta;
      // An image in its own directory wins over an earlier release's copy of the same name.
      if (out.has(meta.name) && dir !== imageDir(paths, meta.name)) continue;
      out.set(meta.name, { ...meta, dir, rootfs: join(dir, "rootfs.ext4") });
    } catch {
      // a directory without metadata is an unfinished build: not an image
    }
  }
  return [...out.values()];
}
