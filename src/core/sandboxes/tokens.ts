// Per-sandbox access tokens: derived from a secret the data directory keeps (created on first
// use, readable by its owner only), so they need no storage and survive a server restart. The
// E2B interface hands one to the client that creates or connects to a sandbox and requires it
// on every call to the sandbox itself.
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export class Tokens {
  private key: Buffer | null = null;

  constructor(private readonly dataDir: string) {}

  private secret(): Buffer {
    if (this.key) return this.key;
    const file = join(this.dataDir, "server.key");
    try {
      writeFileSync(file, randomBytes(32).toString("hex"), { flag: "wx", mode: 0o600 });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
    this.key = Buffer.from(readFileSync(file, "utf8").trim(), "hex");
    if (this.key.length < 32) throw new Error(`${file} is not a server key: remove it and a new one is made`);
    return this.key;
  }

  /** The token for `purpose` on sandbox `id`. */
  token(id: string, purpose: string): string {
    return createHmac("sha256", this.secret()).update(`${purpose}\0${id}`).digest("base64url");
  }

  /** Whether `given` is that token (compared in constant time). */
  check(id: string, purpose: string, given: string): boolean {
    const a = createHash("sha256").update(given).digest();
    const b = createHash("sha256").update(this.token(id, purpose)).digest();
    return timingSafeEqual(a, b);
  }
}
