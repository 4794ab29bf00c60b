// What every exec in a sandbox gets unless it says otherwise.
import type { LocalImage } from "../../images/store.js";
import type { NetworkRecord } from "../../store/sandboxes.js";
import { proxyEnv } from "../network.js";
import { trustEnv } from "../guest/trust.js";
import type { ExecDefaults } from "../guest/sandbox.js";

/** Exec defaults of a sandbox: the image's env and working directory, then the sandbox's env. */
export function execDefaults(image: LocalImage | null, env: Record<string, string> | null, user: string | null, network?: NetworkRecord): ExecDefaults {
  // The proxy's address comes first so that an image or sandbox may point elsewhere (to no avail).
  const fromImage: Record<string, string> = network?.mode === "allowlist" ? { ...proxyEnv(), ...(network.rules ? trustEnv() : {}) } : {};
  for (const kv of image?.config?.Env ?? []) {
    const i = kv.indexOf("=");
    if (i > 0) fromImage[kv.slice(0, i)] = kv.slice(i + 1);
  }
  const merged = { ...fromImage, ...env };
  return { env: Object.keys(merged).length ? merged : undefined, cwd: image?.config?.WorkingDir || undefined, user: user ?? undefined };
}
