// The content-addressed blob cache shared by all images: <data>/blobs/sha256/<hex>. A blob
// enters only after its bytes hashed to its name; a mismatch leaves nothing behind.
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, readFile, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
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
    const got = await this.receive(source, (size) => {
      onBytes?.(size);
      if (expectedSize !== undefined && size > expectedSize) throw new DigestMismatchError(`${what} is larger than its declared ${expectedSize} bytes`);
    });
    try {
      if (got.digest !== digest) throw new DigestMismatchError(`${what} does not match its digest: expected ${digest}, got ${got.digest}`);
      if (expectedSize !== undefined && got.size !== expectedSize) throw new DigestMismatchError(`${what} is ${got.size} bytes, its descriptor says ${expectedSize}`);
      await rename(got.tmp, final);
      return final;
    } catch (e) {
      await rm(got.tmp, { force: true });
      throw e;
    }
  }

  /** Stores a blob whose digest is not known beforehand (one we make); returns its digest and size. */
  async putNew(source: AsyncIterable<Uint8Array> | Iterable<Uint8Array> | Readable): Promise<{ digest: string; size: number }> {
    const got = await this.receive(source);
    await rename(got.tmp, this.path(got.digest));
    return { digest: got.digest, size: got.size };
  }

  // A stream written to a temporary file beside the blobs while it is hashed; `check` sees the
  // running size and may refuse it. The file is gone again when anything fails.
  private async receive(
    source: AsyncIterable<Uint8Array> | Iterable<Uint8Array> | Readable,
    check?: (size: number) => void,
  ): Promise<{ tmp: string; digest: string; size: number }> {
    await mkdir(join(this.dir, "sha256"), { recursive: true });
    const tmp = join(this.dir, "sha256", `.part-${randomBytes(6).toString("hex")}`);
    const hash = createHash("sha256");
    let size = 0;
    try {
      await pipeline(
        Readable.from(source),
        async function* (src) {
          for await (const c of src) {
            hash.update(c);
            size += c.length;
            check?.(size);
            yield c;
          }
        },
        createWriteStream(tmp, { mode: 0o644 }),
      );
      return { tmp, digest: `sha256:${hash.digest("hex")}`, size };
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
