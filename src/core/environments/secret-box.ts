// Registry secrets at rest: AES-256-GCM under a key file only this server reads (0600, made on
// first use), bound to the connection's id so a sealed value copied to another row will not open.
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname } from "node:path";

const PREFIX = "sealed:v1:";

export class SecretBox {
  private key: Promise<Buffer> | null = null;

  constructor(private readonly keyFile: string) {}

  /** `secret` encrypted for the row `id`. */
  async seal(id: string, secret: string): Promise<string> {
    const iv = randomBytes(12);
    const c = createCipheriv("aes-256-gcm", await this.loadKey(), iv);
    c.setAAD(Buffer.from(id));
    const body = Buffer.concat([c.update(secret, "utf8"), c.final()]);
    return PREFIX + Buffer.concat([iv, c.getAuthTag(), body]).toString("base64");
  }

  /** The plain secret of a sealed value; throws when it was sealed under another key or row. */
  async open(id: string, sealed: string): Promise<string> {
    if (!sealed.startsWith(PREFIX)) throw new Error("not a sealed secret");
    const raw = Buffer.from(sealed.slice(PREFIX.length), "base64");
    const d = createDecipheriv("aes-256-gcm", await this.loadKey(), raw.subarray(0, 12));
    d.setAAD(Buffer.from(id));
    d.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([d.update(raw.subarray(28)), d.final()]).toString("utf8");
  }

  static isSealed(v: string): boolean {
    return v.startsWith(PREFIX);
  }

  private loadKey(): Promise<Buffer> {
    this.key ??= (async () => {
      const have = await readFile(this.keyFile).catch(() => null);
      if (have) {
        if (have.length !== 32) throw new Error(`${this.keyFile} must hold 32 bytes`);
        return have;
      }
      const key = randomBytes(32);
      await mkdir(dirname(this.keyFile), { recursive: true, mode: 0o700 });
      // "wx": two servers racing to make the key cannot each keep a different one.
      await writeFile(this.keyFile, key, { mode: 0o600, flag: "wx" }).catch(async (e) => {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      });
      return readFile(this.keyFile);
    })();
    this.key.catch(() => {
      this.key = null;
    });
    return this.key;
  }
}
