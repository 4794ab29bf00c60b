// Images the server makes itself instead of pulling them: the system images (systemd, the
// desktop), built from Debian's archive when a spawn first names one (setup/base-image.ts makes
// the builder; core calls it through this port).

export interface BuiltInImages {
  /** Whether the server can build `name` (a canonical image name) here: one of its own, and the right to (root). */
  canBuild(name: string): boolean;
  /** Builds it into the server's data directory, saying each step. */
  build(name: string, log: (m: string) => void): Promise<void>;
}
