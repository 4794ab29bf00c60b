// What every exec in a sandbox gets unless it says otherwise.
import type { LocalImage } from "../../images/store.js";
import type { NetworkRecord } from "../../store/sandboxes.js";
import { networkEnv } from "../network.js";
import type { ExecDefaults } from "../guest/sandbox.js";

/** Exec defaults of a sandbox: the image's env and working directory, then the sandbox's env. */
export function execDefaults(image: LocalImage | null, env: Record<string, string> | null, user: string | null, network?: NetworkRecord): ExecDefaults {
  const fromImage: Record<string, string> = {};
  for (const kv of image?.config?.Env ?? []) {
    const i = kv.indexOf("=");
    if (i > 0) fromImage[kv.slice(0, i)] = kv.slice(i + 1);
  }
  const merged = { ...fromImage, ...env };
  // The proxy's address goes under the rest, so that an image or sandbox may point elsewhere (to no avail).
  return { network: networkEnv(network), env: Object.keys(merged).length ? merged : undefined, cwd: image?.config?.WorkingDir || undefined, user: user ?? undefined };
}
