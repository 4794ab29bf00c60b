// The ssh server setup builds for guests that have none (setup/ssh-server.ts builds it, the core
// copies it into a guest on its first ssh connection: core/guest/ssh.ts). What both agree on.
import { readFile } from "node:fs/promises";
import { join } from "node:path";

/** Where the bundle lives inside a guest. Its executables name this path as their loader's. */
export const GUEST_SSH_DIR = "/opt/forgevm/ssh";

/** What a built bundle says of itself (bundle.json): the packages it came from and a digest of its files. */
export interface SshBundle {
  packages: Record<string, string>;
  /** Changes whenever any file of the bundle does; a guest holding another one is given this one. */
  digest: string;
  /** Every file, relative to the bundle's root, with its mode. */
  files: { path: string; mode: number }[];
}

/** The bundle's description, or null when none is built at `dir`. */
export async function readSshBundle(dir: string): Promise<SshBundle | null> {
  return readFile(join(dir, "bundle.json"), "utf8").then(
    (t) => JSON.parse(t) as SshBundle,
    () => null,
  );
}
