// Where ForgeVM keeps its files. Everything lives under one data directory: the guest kernel,
// the agent initramfs, images, per-VM runtime directories and cached probe verdicts.
import { homedir } from "node:os";
import { join, resolve } from "node:path";

export interface Paths {
  dataDir: string;
  kernelDir: string;
  /** Uncompressed guest kernel with a PVH entry point. */
  kernel: string;
  /** Guest kernel modules the initramfs carries, with modules.order. */
  modulesDir: string;
  /** The initramfs holding the agent (PID 1) and the modules. */
  initramfs: string;
  /** The agent binary itself, for sandboxes without a VM (the local provider). */
  agentBinary: string;
  /** The guest's git credential helper, copied into sandboxes that forward git (core/guest/forwards.ts). */
  gitCredentialHelper: string;
  imagesDir: string;
  /** Content-addressed layer and config blobs shared by images. */
  blobsDir: string;
  vmsDir: string;
  /** One directory per snapshot: migration stream, RAM file, frozen disk. */
  snapshotsDir: string;
  stateDir: string;
  /** The ssh server carried into guests that have none (setup/ssh-server.ts). */
  sshServer: string;
}

/** The data directory: $FORGEVM_DATA_DIR, else $XDG_DATA_HOME/forgevm, else ~/.local/share/forgevm. */
export function defaultDataDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.FORGEVM_DATA_DIR) return resolve(env.FORGEVM_DATA_DIR);
  const xdg = env.XDG_DATA_HOME || join(homedir(), ".local", "share");
  return join(xdg, "forgevm");
}

/** Every path derived from one data directory. */
export function pathsFor(dataDir: string = defaultDataDir()): Paths {
  const kernelDir = join(dataDir, "kernel");
  return {
    dataDir,
    kernelDir,
    kernel: join(kernelDir, "vmlinux"),
    modulesDir: join(kernelDir, "modules"),
    initramfs: join(dataDir, "agent", "initramfs.cpio"),
    agentBinary: join(dataDir, "agent", "forgevm-agent"),
    gitCredentialHelper: join(dataDir, "agent", "git-credential-forgevm"),
    imagesDir: join(dataDir, "images"),
    blobsDir: join(dataDir, "blobs"),
    vmsDir: join(dataDir, "vms"),
    snapshotsDir: join(dataDir, "snapshots"),
    stateDir: join(dataDir, "state"),
    sshServer: join(dataDir, "ssh-server"),
  };
}
