// The egress CA: a certificate authority of this server's own, made on first use, with which the
// egress proxy presents a certificate for a destination that has egress rules, so that it can
// read the request and add the rule's headers. Its key is a file only the server's user reads
// (0600, in a 0700 directory of the data directory, which no VMM can see); no guest gets it or
// any certificate for a host without a rule. Leaf certificates are made in memory, per host, and
// share one key; they last a week and are made again before they run out.
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import forge from "node-forge";

const CA_DAYS = 3650;
const LEAF_DAYS = 7;
const LEAF_RENEW_MS = 24 * 3600_000;

export interface Leaf {
  cert: string;
  key: string;
}

export class EgressCa {
  private loaded: Promise<{ cert: forge.pki.Certificate; key: forge.pki.rsa.PrivateKey; pem: string }> | null = null;
  private leafKey: { pem: string; pub: forge.pki.rsa.PublicKey } | null = null;
  private readonly leaves = new Map<string, { leaf: Leaf; until: number }>();

  constructor(private readonly dir: string) {}

  /** The CA's certificate (PEM), made with its key on first use. */
  async certPem(): Promise<string> {
    return (await this.load()).pem;
  }

  /** A certificate for `host` (a normal hostname) signed by the CA, with its key (PEM). */
  async leaf(host: string): Promise<Leaf> {
    const have = this.leaves.get(host);
    if (have && have.until > Date.now() + LEAF_RENEW_MS) return have.leaf;
    const ca = await this.load();
    this.leafKey ??= (() => {
      const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
      return { pem: privateKey.export({ type: "pkcs8", format: "pem" }).toString(), pub: forge.pki.publicKeyFromPem(publicKey.export({ type: "spki", format: "pem" }).toString()) };
    })();
    const cert = forge.pki.createCertificate();
    cert.publicKey = this.leafKey.pub;
    cert.serialNumber = serial();
    cert.validity.notBefore = new Date(Date.now() - 3600_000);
    cert.validity.notAfter = new Date(Date.now() + LEAF_DAYS * 86400_000);
    cert.setSubject([{ name: "commonName", value: host }]);
    cert.setIssuer(ca.cert.subject.attributes);
    cert.setExtensions([
      { name: "basicConstraints", cA: false },
      { name: "keyUsage", digitalSignature: true, keyEncipherment: true },
      { name: "extKeyUsage", serverAuth: true },
      { name: "subjectAltName", altNames: [{ type: 2, value: host }] },
    ]);
    cert.sign(ca.key, forge.md.sha256.create());
    const leaf = { cert: forge.pki.certificateToPem(cert), key: this.leafKey.pem };
    this.leaves.set(host, { leaf, until: cert.validity.notAfter.getTime() });
    return leaf;
  }

  private load() {
    this.loaded ??= (async () => {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      const key = await this.loadKey(join(this.dir, "ca.key"));
      const certFile = join(this.dir, "ca.crt");
      const have = await readFile(certFile, "utf8").catch(() => null);
      if (have) {
        const cert = forge.pki.certificateFromPem(have);
        if (forge.pki.publicKeyToPem(cert.publicKey) === forge.pki.publicKeyToPem(forge.pki.setRsaPublicKey(key.n, key.e))) return { cert, key, pem: have };
      }
      // Made from the key alone, subject included, so that two servers racing here make the same CA.
      const cert = forge.pki.createCertificate();
      cert.publicKey = forge.pki.setRsaPublicKey(key.n, key.e);
      cert.serialNumber = serial();
      cert.validity.notBefore = new Date(Date.now() - 3600_000);
      cert.validity.notAfter = new Date(Date.now() + CA_DAYS * 86400_000);
      const id = forge.md.sha256.create().update(forge.pki.publicKeyToPem(cert.publicKey)).digest().toHex().slice(0, 12);
      const name = [
        { name: "commonName", value: "ForgeVM egress CA" },
        { name: "organizationName", value: `ForgeVM server ${id}` },
      ];
      cert.setSubject(name);
      cert.setIssuer(name);
      cert.setExtensions([
        { name: "basicConstraints", cA: true, pathLenConstraint: 0, critical: true },
        { name: "keyUsage", keyCertSign: true, cRLSign: true, critical: true },
        { name: "subjectKeyIdentifier" },
      ]);
      cert.sign(key, forge.md.sha256.create());
      const pem = forge.pki.certificateToPem(cert);
      const tmp = `${certFile}.${process.pid}.tmp`;
      await writeFile(tmp, pem, { mode: 0o644 });
      await rename(tmp, certFile);
      return { cert, key, pem };
    })();
    this.loaded.catch(() => {
      this.loaded = null;
    });
    return this.loaded;
  }

  /** The CA's key, made and written exclusively (mode 0600) when there is none. */
  private async loadKey(file: string): Promise<forge.pki.rsa.PrivateKey> {
    const have = await readFile(file, "utf8").catch(() => null);
    if (have) return forge.pki.privateKeyFromPem(have) as forge.pki.rsa.PrivateKey;
    const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    const pem = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    try {
      await writeFile(file, pem, { mode: 0o600, flag: "wx" });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      return this.loadKey(file);
    }
    return forge.pki.privateKeyFromPem(pem) as forge.pki.rsa.PrivateKey;
  }
}

/** A positive random serial number, as hex. */
function serial(): string {
  const b = randomBytes(16);
  b[0] &= 0x7f;
  return b.toString("hex");
}
