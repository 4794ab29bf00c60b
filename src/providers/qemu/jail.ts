// The confined VMM: when the server runs as root, every QEMU starts through jail/forgevm-jail
// as a uid of its own, in a mount namespace where the server's data directory, home
// directories and temporary directories are empty, except for the files of its own VM (its
// directory read-write; kernel, initramfs, disk backing chain and snapshot RAM read-only).
import { existsSync, statSync } from "node:fs";
import { open } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
export const JAIL_HELPER = join(ROOT, "jail", "build", "forgevm-jail");
export const JAIL_PRELOAD = join(ROOT, "jail", "build", "rofile.so");

/** VM uids are drawn from [UID_BASE, UID_BASE + UID_SPAN): far above any real account. */
export const UID_BASE = 2_000_000_000;
const UID_SPAN = 1 << 24;

/** Never hidden: what the VMM itself runs from. */
const SYSTEM = ["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/dev", "/proc", "/sys"];

export interface JailConfig {
  helper: string;
  /** Directories the VMM sees as empty (apart from its own files bound back in). */
  hide: string[];
}

/**
 * The jail to use: on when running as root, off otherwise, since an unprivileged server cannot
 * change uid or mount. Throws when it should be on but the helper was never built.
 */
export function jailConfig(dataDir: string): JailConfig | null {
  if (process.getuid?.() !== 0) return null;
  if (!existsSync(JAIL_HELPER) || !existsSync(JAIL_PRELOAD)) {
    throw new Error(`the VMM jail helper is missing (${JAIL_HELPER}): run ./setup.sh (or make -C jail), or set providers.qemu.jail: false (FORGEVM_JAIL=off)`);
  }
  const candidates = [dataDir, homedir(), process.cwd(), "/root", "/home", "/tmp", "/var/tmp", "/var/lib", "/run", "/srv", "/mnt", "/media", "/opt"];
  const hide = [...new Set(candidates.map((p) => resolve(p)))].filter((p) => hideable(p));
  return { helper: JAIL_HELPER, hide };
}

/** A directory may be hidden unless it is "/" or holds, or lies in, what the VMM runs from. */
function hideable(p: string): boolean {
  if (p === "/" || !existsSync(p)) return false;
  return !SYSTEM.some((s) => p === s || s.startsWith(`${p}/`) || p.startsWith(`${s}/`));
}

/** A fresh VM uid (its gid is the same number) not used by any of `inUse`. */
export function allocateUid(inUse: Set<number>): number {
  for (;;) {
    const uid = UID_BASE + Math.floor(Math.random() * UID_SPAN);
    if (!inUse.has(uid)) return uid;
  }
}

/** The gid owning /dev/kvm, which a VMM using KVM needs as a supplementary group. */
export function kvmGroup(): number | null {
  try {
    return statSync("/dev/kvm").gid;
  } catch {
    return null;
  }
}

/** The first four bytes of a qcow2 image ("QFI\xfb"). */
const QCOW2_MAGIC = 0x514649fb;

/** Whether a disk image is qcow2 (else raw). */
export async function isQcow2(file: string): Promise<boolean> {
  const fh = await open(file, "r");
  try {
    const head = Buffer.alloc(4);
    await fh.read(head, 0, 4, 0);
    return head.readUInt32BE(0) === QCOW2_MAGIC;
  } finally {
    await fh.close();
  }
}

/**
 * Every file a qcow2 image reads through: itself and its backing files, following relative
 * names from each file's directory. Read from the headers directly (qemu-img costs ~30 ms).
 */
export async function backingChain(file: string): Promise<string[]> {
  const chain: string[] = [];
  let cur: string | null = resolve(file);
  while (cur && chain.length < 1024) {
    chain.push(cur);
    const fh = await open(cur, "r");
    try {
      const head = Buffer.alloc(20);
      await fh.read(head, 0, 20, 0);
      if (head.readUInt32BE(0) !== QCOW2_MAGIC) break; // not qcow2 (a raw image): the chain ends
      const offset = Number(head.readBigUInt64BE(8));
      const size = head.readUInt32BE(16);
      if (!offset || !size || size > 4096) break;
      const name = Buffer.alloc(size);
      await fh.read(name, 0, size, offset);
      const s = name.toString("utf8");
      cur = s.startsWith("/") ? s : join(dirname(cur), s);
    } finally {
      await fh.close();
    }
  }
  return chain;
}

/** The virtual size of a qcow2 image: the most its overlay can hold (from the header). */
export async function qcowVirtualSize(file: string): Promise<number> {
  const fh = await open(file, "r");
  try {
    const head = Buffer.alloc(32);
    await fh.read(head, 0, 32, 0);
    return head.readUInt32BE(0) === QCOW2_MAGIC ? Number(head.readBigUInt64BE(24)) : (await fh.stat()).size;
  } finally {
    await fh.close();
  }
}

export interface JailSpec {
  uid: number;
  groups: number[];
  rw: string[];
  ro: string[];
  rlimits: Record<"as" | "nofile" | "core" | "fsize", number>;
  nice?: number;
  /** Environment the VMM gets on top of the helper's (set after the jail is built). */
  env?: Record<string, string>;
  /** `cgroup.procs` files the VMM joins (host-side limits). */
  cgroups?: string[];
  /** Stay in the host's network namespace (a VMM with a network device, confined by the firewall). */
  hostNet?: boolean;
}

/** The helper's argument list (before `--` and the VMM's own command line). */
export function jailArgs(cfg: JailConfig, s: JailSpec): string[] {
  const args = ["--uid", String(s.uid), "--gid", String(s.uid), "--proc"];
  if (s.hostNet) args.push("--host-net");
  for (const g of s.groups) args.push("--group", String(g));
  for (const h of cfg.hide) args.push("--hide", h);
  for (const p of s.rw) args.push("--rw", p);
  for (const p of s.ro) args.push("--ro", p);
  for (const [k, v] of Object.entries(s.rlimits)) args.push("--rlimit", `${k}=${v}`);
  if (s.nice) args.push("--nice", String(s.nice));
  for (const [k, v] of Object.entries(s.env ?? {})) args.push("--setenv", `${k}=${v}`);
  for (const c of s.cgroups ?? []) args.push("--cgroup", c);
  return args;
}
