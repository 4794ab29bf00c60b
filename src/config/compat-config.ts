// A forgevm.yaml written for the ForgeVM API, read as what serves it here. Its provider names are Firecracker
// ("firecracker", the production one), the host-process one ("mock") and the Custom HTTP
// protocol ("custom", served by providers/custom-http); its `auth.enabled: false` turns the key off. A user's existing file loads
// unchanged: each name becomes the provider that does that job here, and a note says so at start.
import { existsSync } from "node:fs";
import type { Config } from "./schema.js";

/** The ForgeVM API's provider names and the providers that serve them here. */
export const COMPAT_PROVIDERS: Record<string, string> = { firecracker: "qemu", mock: "local" };

/** Rewrites the ForgeVM API's names in a validated config in place: one note per rewrite, or the problem that stops it. */
export function compatNames(cfg: Config): { notes: string[]; problem?: string } {
  const notes: string[] = [];
  if (!cfg.auth.enabled && cfg.auth.api_key) {
    cfg.auth.api_key = "";
    notes.push("auth.enabled is false: the API key in the config is not required");
  }
  const fc = cfg.providers.firecracker;
  const asked = cfg.providers.default;
  if (asked === "firecracker" || fc.enabled) {
    const binary = existsSync(fc.firecracker_path)
      ? `this build has no Firecracker backend, so the binary at ${fc.firecracker_path} is not used`
      : `no Firecracker binary is at ${fc.firecracker_path}`;
    notes.push(`providers.firecracker: QEMU microVMs serve its sandboxes (${binary}; its kernel_path, agent_path and data_dir are Firecracker's and not read)`);
  }
  if (asked === "mock") {
    cfg.providers.local.enabled = true;
    notes.push('providers.default "mock": the local provider serves it (Linux namespaces on this host, no VM: not a security boundary)');
  }
  if (asked === "custom" || asked === cfg.providers.custom.name) {
    if (!cfg.providers.custom.base_url)
      return { notes, problem: `providers.default "${asked}": the Custom HTTP provider needs providers.custom.base_url, the address of a backend that speaks the protocol` };
    // The ForgeVM API names the provider "custom" whatever its `name`; here it runs under that name.
    cfg.providers.default = cfg.providers.custom.name;
  }
  if (COMPAT_PROVIDERS[asked]) cfg.providers.default = COMPAT_PROVIDERS[asked];
  return { notes };
}
