// Choosing the accelerator. KVM is used wherever it actually runs a guest: some hosts expose
// /dev/kvm that cannot run a stock kernel (nested PVM), so "auto" boots a probe VM once,
// falls back to TCG, and caches the verdict keyed by QEMU and kernel.
import { constants } from "node:fs";
import { access, mkdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Accel } from "../provider.js";

export type AccelMode = "auto" | Accel;

export interface AccelVerdict {
  accel: Accel;
  reason: string;
  key: string;
  probedAt: string;
}

/** Whether this process can open /dev/kvm for reading and writing. */
export async function kvmAccessible(): Promise<boolean> {
  try {
    await access("/dev/kvm", constants.R_OK | constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/** Resolves the accelerator for `mode`, probing KVM with `probe` at most once per cache key. */
export async function resolveAccel(mode: AccelMode, opts: { stateDir: string; kernel: string; qemuVersion: string; probe: () => Promise<boolean> }): Promise<AccelVerdict> {
  const now = new Date().toISOString();
  if (mode === "tcg") return { accel: "tcg", reason: "forced by configuration", key: "", probedAt: now };
  if (mode === "kvm") {
    if (!(await kvmAccessible())) throw new Error("accel is set to kvm but /dev/kvm cannot be opened (set accel to auto or tcg)");
    return { accel: "kvm", reason: "forced by configuration", key: "", probedAt: now };
  }
  if (!(await kvmAccessible())) return { accel: "tcg", reason: "/dev/kvm is not available", key: "", probedAt: now };
  const k = await stat(opts.kernel);
  const key = `${opts.qemuVersion}|${k.size}|${k.mtimeMs}`;
  const cacheFile = join(opts.stateDir, "accel.json");
  try {
    const cached = JSON.parse(await readFile(cacheFile, "utf8")) as AccelVerdict;
    if (cached.key === key && (cached.accel === "kvm" || cached.accel === "tcg")) return cached;
  } catch {
    // no verdict yet
  }
  const ok = await opts.probe();
  const verdict: AccelVerdict = {
    accel: ok ? "kvm" : "tcg",
    reason: ok ? "a KVM probe VM answered" : "a KVM probe VM did not answer in time; KVM cannot run this guest kernel here",
    key,
    probedAt: now,
  };
  await mkdir(opts.stateDir, { recursive: true });
  await writeFile(cacheFile, `${JSON.stringify(verdict, null, 2)}\n`);
  return verdict;
}
