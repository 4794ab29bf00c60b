// Entry point of the core: opens the data directory, owns the provider and the live sandboxes.
import { randomBytes } from "node:crypto";
import { defaultDataDir, pathsFor, type Paths } from "../config/paths.js";
import { DEFAULT_IMAGE, resolveImage } from "../images/store.js";
import type { AccelMode } from "../providers/qemu/accel.js";
import { QemuProvider } from "../providers/qemu/qemu-provider.js";
import { Sandbox } from "./sandbox.js";

export interface ForgeOptions {
  /** Data directory (default: $FORGEVM_DATA_DIR or the XDG data directory). */
  dataDir?: string;
  accel?: AccelMode;
}

export interface SpawnOptions {
  /** Image name; default DEFAULT_IMAGE. */
  image?: string;
  memoryMb?: number;
  vcpus?: number;
  /** Writable disk size; the guest's root filesystem grows to fill it. */
  diskMb?: number;
  hostname?: string;
  bootTimeoutMs?: number;
}

export const SPAWN_DEFAULTS = { memoryMb: 512, vcpus: 1, diskMb: 2048 } as const;

export class Forge {
  private readonly live = new Map<string, Sandbox>();

  private constructor(
    readonly paths: Paths,
    readonly provider: QemuProvider,
  ) {}

  /** Opens ForgeVM on a data directory that ./setup.sh has prepared. */
  static async open(opts: ForgeOptions = {}): Promise<Forge> {
    const paths = pathsFor(opts.dataDir ?? defaultDataDir());
    return new Forge(paths, new QemuProvider({ paths, accel: opts.accel ?? envAccel() }));
  }

  /** Boots a sandbox and returns once its agent answers. */
  async spawn(opts: SpawnOptions = {}): Promise<Sandbox> {
    const image = await resolveImage(this.paths, opts.image ?? DEFAULT_IMAGE);
    const id = `sb-${randomBytes(5).toString("hex")}`;
    const vm = await this.provider.spawn({
      id,
      rootfs: image.rootfs,
      memoryMb: opts.memoryMb ?? SPAWN_DEFAULTS.memoryMb,
      vcpus: opts.vcpus ?? SPAWN_DEFAULTS.vcpus,
      diskMb: opts.diskMb ?? SPAWN_DEFAULTS.diskMb,
      hostname: opts.hostname ?? id,
      bootTimeoutMs: opts.bootTimeoutMs,
    });
    const sb = new Sandbox(id, image.name, vm, (s) => this.live.delete(s.id));
    this.live.set(id, sb);
    return sb;
  }

  get(id: string): Sandbox | undefined {
    return this.live.get(id);
  }

  list(): Sandbox[] {
    return [...this.live.values()];
  }

  /** Destroys every sandbox this instance started. */
  async close(): Promise<void> {
    await Promise.all(this.list().map((s) => s.destroy()));
    await this.provider.destroyAll();
  }
}

function envAccel(): AccelMode | undefined {
  const v = process.env.FORGEVM_ACCEL;
  if (v === undefined || v === "") return undefined;
  if (v === "auto" || v === "kvm" || v === "tcg") return v;
  throw new RangeError(`FORGEVM_ACCEL must be auto, kvm or tcg, got "${v}"`);
}
