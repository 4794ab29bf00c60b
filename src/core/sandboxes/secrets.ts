// Secrets: values a sandbox's programs get without anything writing them down. They live in
// this process's memory only, reach the guest as the environment of each exec and as files on
// the guest's /run tmpfs (/run/secrets/NAME, root-only), and are never put in the store, an
// event, a log, an image, an overlay or a snapshot (a sandbox holding secrets cannot be
// snapshotted or forked: its RAM holds them).
import type { Vm } from "../../providers/provider.js";
import { badRequest } from "../../http/errors.js";

export const SECRETS_DIR = "/run/secrets";

/** What a sandbox refused for its in-guest secrets should use instead. */
export const EGRESS_HINT = "store them with POST /secrets or forgevm secret add and name them in egress rules: the proxy adds them to requests, and they never enter the sandbox";
const NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const MAX_SECRETS = 64;
const MAX_VALUE = 64 * 1024;

/** Where a template's secret goes: the exec environment, a file, or both (default). */
export type InjectAt = "env" | "file" | "both";

export interface SecretDecl {
  name: string;
  inject_at?: InjectAt;
}

/** A sandbox's secrets, split by where they go. */
export interface PlannedSecrets {
  env: Record<string, string>;
  files: Record<string, string>;
}

function checkNames(names: string[]): void {
  if (names.length > MAX_SECRETS) throw badRequest(`secrets: at most ${MAX_SECRETS}`);
  for (const n of names) {
    if (!NAME.test(n)) throw badRequest(`secrets: "${n}" is not a valid name (letters, digits and _, not starting with a digit)`);
  }
}

/** Checks a template's secret declarations; throws a 400 naming the bad one. */
export function checkDecls(decls: SecretDecl[]): void {
  checkNames(decls.map((d) => d.name));
  for (const d of decls) {
    if (d.inject_at !== undefined && !["env", "file", "both"].includes(d.inject_at)) throw badRequest(`secrets: inject_at of ${d.name} must be env, file or both`);
  }
}

/**
 * The secrets of a spawn: the values it passes, plus those its template declares, whose values
 * come from the request or else from the server's own (`host`: FORGEVM_SECRET_<NAME> for `forgevm serve`).
 */
export function planSecrets(given: Record<string, string> | undefined, decls: SecretDecl[] = [], host: Record<string, string> = {}): PlannedSecrets | null {
  const values = { ...given };
  const names = Object.keys(values);
  checkNames(names);
  for (const [k, v] of Object.entries(values)) {
    if (typeof v !== "string" || Buffer.byteLength(v) > MAX_VALUE) throw badRequest(`secrets: ${k} must be a string of at most ${MAX_VALUE} bytes`);
  }
  const out: PlannedSecrets = { env: {}, files: {} };
  const where = new Map<string, InjectAt>(names.map((n) => [n, "both"]));
  for (const d of decls) {
    if (values[d.name] === undefined) {
      const fromHost = host[d.name];
      if (fromHost === undefined) throw badRequest(`secrets: the template needs ${d.name}; pass it in "secrets" or set FORGEVM_SECRET_${d.name} for the server`);
      values[d.name] = fromHost;
    }
    where.set(d.name, d.inject_at ?? "both");
  }
  for (const [name, at] of where) {
    if (at !== "file") out.env[name] = values[name];
    if (at !== "env") out.files[name] = values[name];
  }
  return where.size ? out : null;
}

/** Writes the file secrets to the guest's tmpfs (never its disk), readable by root only. */
export async function injectSecretFiles(vm: Vm, files: Record<string, string>): Promise<void> {
  if (!Object.keys(files).length) return;
  await vm.guest.request<"mkdir">({ op: "mkdir", path: SECRETS_DIR, mode: 0o700, parents: true });
  for (const [name, value] of Object.entries(files)) await vm.guest.writeFile(`${SECRETS_DIR}/${name}`, value, { mode: 0o400 });
}
