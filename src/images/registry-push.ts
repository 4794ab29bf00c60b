// Pushing an image to a registry (distribution API v2): each blob the registry lacks is mounted
// from a repository of the same registry that has it, or uploaded in one PUT; blobs it has are
// skipped; the manifest goes last, under the tag, exactly as stored, so the digest the registry
// serves is the one we report.
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import type { BlobStore } from "./blobs.js";
import type { Descriptor } from "./oci.js";
import type { ImageReference } from "./reference.js";
import { PullError, type RegistryClient } from "./registry.js";

export interface PushedBlob {
  digest: string;
  size: number;
  /** exists: the registry had it; mounted: copied there from another repository; uploaded: sent. */
  status: "exists" | "mounted" | "uploaded";
}

export interface PushResult {
  reference: string;
  digest: string;
  blobs: PushedBlob[];
  /** Bytes sent in blob uploads. */
  uploaded: number;
}

export interface PushRequest {
  ref: ImageReference;
  manifestBytes: Buffer;
  manifestMediaType: string;
  manifestDigest: string;
  /** The config and the layers. */
  blobs: Descriptor[];
  /** Repositories of the same registry that may hold these blobs (where the image came from). */
  mountFrom?: string[];
}

async function failure(res: Response, what: string): Promise<PullError> {
  const text = (await res.text().catch(() => "")).slice(0, 300);
  if (res.status === 401 || res.status === 403)
    return new PullError("unauthorized", `the registry refused ${what} (HTTP ${res.status}): add credentials for it (registry_auth in the config, or ~/.docker/config.json)`);
  return new PullError("invalid", `the registry answered HTTP ${res.status} to ${what}${text ? `: ${text}` : ""}`);
}

/** Pushes an image whose blobs are all in `store`. */
export async function pushImage(client: RegistryClient, store: BlobStore, req: PushRequest, onBlob: (b: PushedBlob) => void = () => {}): Promise<PushResult> {
  const { ref } = req;
  const out: PushedBlob[] = [];
  let uploaded = 0;
  for (const d of req.blobs) {
    const size = (await stat(store.path(d.digest)).catch(() => null))?.size;
    if (size === undefined) throw new PullError("invalid", `blob ${d.digest} of the image is not in the local store`);
    let status: PushedBlob["status"] | null = null;
    const head = await client.send(ref, `/blobs/${d.digest}`, { method: "HEAD", access: "pull,push" });
    await head.body?.cancel();
    if (head.ok) status = "exists";
    let location: string | null = null;
    for (const from of status ? [] : (req.mountFrom ?? []).filter((r) => r !== ref.repository)) {
      const res = await client.send(ref, `/blobs/uploads/?mount=${encodeURIComponent(d.digest)}&from=${encodeURIComponent(from)}`, { method: "POST", access: "pull,push" });
      await res.body?.cancel();
      if (res.status === 201) {
        status = "mounted";
        break;
      }
      if (res.status === 202) location = res.headers.get("location"); // not there: an upload session was opened instead
    }
    if (!status) {
      if (!location) {
        const res = await client.send(ref, "/blobs/uploads/", { method: "POST", access: "pull,push" });
        await res.body?.cancel();
        if (res.status !== 202 || !res.headers.get("location")) throw await failure(res, `starting the upload of ${d.digest}`);
        location = res.headers.get("location")!;
      }
      // The Location is a URL or a path on the registry; the digest is added to its query.
      const absolute = /^https?:/.test(location);
      const url = new URL(location, "http://registry.invalid/");
      url.searchParams.set("digest", d.digest);
      const res = await client.send(ref, absolute ? url.toString() : `${url.pathname}${url.search}`, {
        method: "PUT",
        access: "pull,push",
        headers: { "Content-Type": "application/octet-stream", "Content-Length": String(size) },
        body: () => createReadStream(store.path(d.digest)),
      });
      if (res.status !== 201) throw await failure(res, `the upload of ${d.digest}`);
      await res.body?.cancel();
      uploaded += size;
      status = "uploaded";
    }
    const b = { digest: d.digest, size, status };
    out.push(b);
    onBlob(b);
  }
  const tag = ref.tag ?? ref.digest!;
  const res = await client.send(ref, `/manifests/${tag}`, {
    method: "PUT",
    access: "pull,push",
    headers: { "Content-Type": req.manifestMediaType },
    body: () => req.manifestBytes,
  });
  if (res.status !== 201) throw await failure(res, `the manifest of ${ref.canonical}`);
  await res.body?.cancel();
  const served = res.headers.get("docker-content-digest");
  if (served && served !== req.manifestDigest) throw new PullError("invalid", `the registry stored the manifest as ${served}, not ${req.manifestDigest}`);
  return { reference: ref.canonical, digest: req.manifestDigest, blobs: out, uploaded };
}
