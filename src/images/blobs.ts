// The content-addressed blob cache shared by all images: <data>/blobs/sha256/<hex>. A blob
// enters only after its bytes hashed to its name; a mismatch leaves nothing behind.
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, readFile, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import { checkDigest } from "./oci.js";

export class DigestMismatchError extends Error {
  override name = "DigestMismatchError";
}

export class BlobStore {
  constructor(readonly dir: string) {}

  path(digest: string): string {
    return join(this.dir, "sha256", checkDigest(digest, "blob").slice(7));
  }

  has(digest: string): Promise<boolean> {
    return stat(this.path(digest)).then(
      () => true,
      () => false,
    );
  }

  /** Stores a blob from a stream, verifying its digest (and size when known) on the way in. */
  async put(
    digest: string,
    source: AsyncIterable<Uint8Array> | Iterable<Uint8Array> | Readable,
    expectedSize?: number,
    what = digest,
    onBytes?: (received: number) => void,
  ): Promise<string> {
    const final = this.path(digest);
    if (await this.has(digest)) return final;
    await mkdir(join(this.dir, "sha256"), { recursive: true });
    const tmp = `${final}.part-${randomBytes(4).toString("hex")}`;
    const hash = createHash("sha256");
    let size = 0;
    const counter = new Writable({
      write(chunk: Buffer, _e, cb) {
        hash.update(chunk);
        size += chunk.length;
        onBytes?.(size);
        if (expectedSize !== undefined && size > expectedSize) cb(new DigestMismatchError(`${what} is larger than its declared ${expectedSize} bytes`));
        else cb();
      },
    });
    try {
      const file = createWriteStream(tmp, { mode: 0o644 });
      await pipeline(
        Readable.from(source),
        async function* (src) {
          for await (const c of src) {
            await new Promise<void>((res, rej) => counter.write(c, (e) => (e ? rej(e) : res())));
            yield c;
          }
        },
        file,
      );
      const got = `sha256:${hash.digest("hex")}`;
      if (got !== digest) throw new DigestMismatchError(`${what} does not match its digest: expected ${digest}, got ${got}`);
      if (expectedSize !== undefined && size !== expectedSize) throw new DigestMismatchError(`${what} is ${size} bytes, its descriptor says ${expectedSize}`);
      await rename(tmp, final);
      return final;
    } catch (e) {
      await rm(tmp, { force: true });
      throw e;
    }
  }

  /** Stores a blob whose digest is not known beforehand (one we make); returns its digest and size. */
  async putNew(source: AsyncIterable<Uint8Array> | Iterable<Uint8Array> | Readable): Promise<{ digest: string; size: number }> {
    await mkdir(join(this.dir, "sha256"), { recursive: true });
    const tmp = join(this.dir, "sha256", `.new-${randomBytes(6).toString("hex")}`);
    const hash = createHash("sha256");
    let size = 0;
    try {
      await pipeline(
        Readable.from(source),
        async function* (src) {
          for await (const c of src) {
            hash.update(c);
            size += c.length;
            yield c;
          }
        },
        createWriteStream(tmp, { mode: 0o644 }),
      );
      const digest = `sha256:${hash.digest("hex")}`;
      await rename(tmp, this.path(digest));
      return { digest, size };
    } catch (e) {
      await rm(tmp, { force: true });
      throw e;
    }
  }

  /** A small blob's bytes (a manifest or config), or null when it is not here. */
  async read(digest: string): Promise<Buffer | null> {
    return readFile(this.path(digest)).catch(() => null);
  }
}
