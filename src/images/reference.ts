// Image references as Docker users type them: "alpine" means
// registry-1.docker.io/library/alpine:latest; "ghcr.io/org/app@sha256:…" pins a digest.
export const DOCKER_HUB = "registry-1.docker.io";

export interface ImageReference {
  registry: string;
  repository: string;
  tag?: string;
  digest?: string;
  /** registry/repository followed by :tag or @digest (tag dropped when a digest is given). */
  canonical: string;
}

export class ImageReferenceError extends Error {
  override name = "ImageReferenceError";
}

const REPO_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
const DIGEST = /^sha256:[a-f0-9]{64}$/;
/** A registry host: DNS labels separated by dots, and an optional port. */
const REGISTRY = /^[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?$/;

/** Parses a reference, applying Docker Hub's defaults; throws ImageReferenceError naming the problem. */
export function parseReference(input: string): ImageReference {
  const ref = input.trim();
  if (!ref) throw new ImageReferenceError("image reference is empty");
  let rest = ref;
  let digest: string | undefined;
  const at = rest.indexOf("@");
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw new ImageReferenceError(`"${ref}": digest must be sha256: followed by 64 lowercase hex digits`);
  }
  let tag: string | undefined;
  const slash = rest.lastIndexOf("/");
  const colon = rest.lastIndexOf(":");
  if (colon > slash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw new ImageReferenceError(`"${ref}": tag "${tag}" is not valid`);
  }
  const parts = rest.split("/");
  let registry = DOCKER_HUB;
  // The first component is a registry when it looks like a host: has a dot or port, or is localhost.
  if (parts.length > 1 && (parts[0].includes(".") || parts[0].includes(":") || parts[0] === "localhost")) {
    registry = parts.shift()!;
    if (!REGISTRY.test(registry)) throw new ImageReferenceError(`"${ref}": registry "${registry}" is not a host name with an optional port`);
    if (registry === "docker.io" || registry === "index.docker.io") registry = DOCKER_HUB;
  }
  if (registry === DOCKER_HUB && parts.length === 1) parts.unshift("library");
  for (const p of parts) {
    if (!REPO_COMPONENT.test(p)) throw new ImageReferenceError(`"${ref}": repository component "${p}" is not valid (lowercase letters, digits and separators)`);
  }
  const repository = parts.join("/");
  if (!digest && !tag) tag = "latest";
  return { registry, repository, tag: digest ? undefined : tag, digest, canonical: `${registry}/${repository}${digest ? `@${digest}` : `:${tag}`}` };
}

/**
 * A stored (canonical) name as a person typed it, as Docker shows names: Docker Hub's
 * "registry-1.docker.io/" and its "library/" left out ("local/web:v2", "alpine:3.20"); any other
 * name as it is. Both forms find the same image.
 */
export function familiarName(name: string): string {
  const hub = `${DOCKER_HUB}/`;
  if (!name.startsWith(hub)) return name;
  const rest = name.slice(hub.length);
  return rest.startsWith("library/") && !rest.slice(8).includes("/") ? rest.slice(8) : rest;
}
