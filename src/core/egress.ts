// The egress side of a core context: the proxy every allowlisted sandbox's traffic leaves by, the
// secrets store its rules draw on, and the CA it answers HTTPS with for destinations with rules.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Paths } from "../config/paths.js";
import { EgressCa } from "../net/egress-ca.js";
import { EgressProxy } from "../net/egress-proxy.js";
import { PackageCache } from "../net/package-cache.js";
import type { Db } from "../store/db.js";
import { SecretStore } from "../store/secrets.js";
import { SecretBox } from "./environments/secret-box.js";
import type { ForgeOptions } from "./options.js";
import { Secrets } from "./secrets/secrets.js";

/** The proxy, the secrets store and the CA of one server. */
export function makeEgress(paths: Paths, db: Db, opts: ForgeOptions, onDecision: (d: "allow" | "deny") => void): { egress: EgressProxy; secretStore: Secrets; egressCa: EgressCa } {
  const net = opts.network ?? {};
  // The server's key, the one registry credentials are sealed under too.
  const box = new SecretBox(opts.environments?.secretKeyFile || join(paths.dataDir, "keys", "environments.key"));
  const secretStore = new Secrets(new SecretStore(db), box, opts.hostSecrets ?? {});
  const egressCa = new EgressCa(join(paths.dataDir, "keys", "egress-ca"));
  const egress = new EgressProxy({
    onDecision,
    logDir: join(paths.dataDir, "egress"),
    allowPrivate: net.allowPrivate,
    hostsOverride: net.hostsOverride,
    cache: new PackageCache(join(paths.dataDir, "package-cache"), (net.cacheMaxMb ?? 2048) * 1048576),
    ca: egressCa,
    secret: (name) => secretStore.resolve(name),
    upstreamCa: net.upstreamCaFile ? readUpstreamCa(net.upstreamCaFile) : undefined,
  });
  return { egress, secretStore, egressCa };
}

/** The operator's extra upstream CAs; a file that cannot be read or holds no certificate stops the server with a message. */
function readUpstreamCa(file: string): string {
  let pem: string;
  try {
    pem = readFileSync(file, "utf8");
  } catch (e) {
    throw new Error(`network.upstream_ca_file: cannot read ${file}: ${(e as Error).message}`);
  }
  if (!pem.includes("-----BEGIN CERTIFICATE-----")) throw new Error(`network.upstream_ca_file: ${file} holds no PEM certificate`);
  return pem;
}
