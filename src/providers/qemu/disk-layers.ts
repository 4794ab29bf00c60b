// The layers of a VM's root disk. A snapshot (or a fork, or a pause) freezes the disk the guest
// wrote until then, for the snapshot to keep, and moves the guest onto a new qcow2 overlay backed
// by it; so every snapshot adds a layer below the guest's disk. Past MAX_LAYERS the layers are
// collapsed: QEMU's block-stream copies what they hold into the guest's own overlay, in the
// background while the guest runs, and drops them from its chain, which then ends at the image
// again. A chain that only grew made every I/O walk it, and past 64 layers a fork's confined
// QEMU could no longer be given all its files.
import { chown, readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { createOverlay } from "./overlay-file.js";
import { ignore } from "../../util/ignore.js";
import { backingChain } from "./jail.js";
import type { Qmp } from "./qmp.js";

/** Past this many files in the guest's disk chain (its own overlay and the image included), a collapse starts. */
export const MAX_LAYERS = 12;
/** How long a snapshot waits for a collapse under way before it cancels it (it starts again later). */
const SETTLE_MS = 30_000;

export async function activeDisk(qmp: Qmp, vmDir: string): Promise<{ file: string; bytes: number } | null> {
  const blocks = await qmp.execute<Array<{ device: string; inserted?: { image: { "virtual-size": number } } }>>("query-block");
  const root = blocks.find((b) => b.device === "root")?.inserted;
  return root ? { file: await topFile(vmDir), bytes: root.image["virtual-size"] } : null;
}

/**
 * The file the guest writes now: the VM's last overlay in its directory (newOverlay numbers them
 * disk.1.qcow2, disk.2.qcow2, …), else the disk it started on. QEMU's own name for it stops
 * being a path once an overlay's backing is named otherwise than it was opened by (a json:{…}
 * that grows with every layer, and is cut at 4 KiB), so it is not asked.
 */
export async function topFile(vmDir: string): Promise<string> {
  let top = 0;
  for (const name of await readdir(vmDir)) {
    const n = /^disk\.(\d+)\.qcow2$/.exec(name)?.[1];
    if (n && Number(n) > top) top = Number(n);
  }
  return join(vmDir, top ? `disk.${top}.qcow2` : "disk.qcow2");
}

/** A new overlay in a VM's directory, for its guest to go on with after a snapshot. */
export interface Overlay {
  file: string;
  node: string;
}

/**
 * Makes the overlay a VM moves onto when its current disk is frozen for a snapshot. Its backing
 * is named by the snapshot's link (`frozen`), not by the disk's name in the VM's directory: that
 * directory goes with the VM, the snapshot's files stay while anything is backed by them. It is
 * written here, as qemu-img writes it: QEMU's own blockdev-snapshot-sync writes the backing's description,
 * which once a backing was renamed is a json:{…} nesting one level per snapshot, and past eight
 * snapshots it outgrew the 1023 bytes a qcow2 header holds (every later snapshot, fork, pause and
 * stop of the sandbox failed). Made as the VM's own uid when it is confined.
 */
export async function newOverlay(vmDir: string, frozen: string, bytes: number): Promise<Overlay> {
  const names = await readdir(vmDir);
  let n = 1;
  while (names.includes(`disk.${n}.qcow2`)) n++;
  const file = join(vmDir, `disk.${n}.qcow2`);
  await createOverlay(file, { bytes, backing: frozen, unsafe: true });
  const owner = (await stat(vmDir)).uid;
  if (owner !== (process.getuid?.() ?? 0)) await chown(file, owner, owner);
  return { file, node: `root-${n}` };
}

/** Moves a stopped guest onto `overlay`, on top of the disk it wrote until now. */
export async function switchDisk(qmp: Qmp, overlay: Overlay): Promise<void> {
  const blocks = await qmp.execute<Array<{ device: string; inserted?: { "node-name": string } }>>("query-block");
  const active = blocks.find((b) => b.device === "root")?.inserted?.["node-name"];
  if (!active) throw new Error("the VM has no root disk to move onto an overlay");
  await qmp.execute("blockdev-add", { driver: "qcow2", "node-name": overlay.node, file: { driver: "file", filename: overlay.file }, backing: null });
  await qmp.execute("blockdev-snapshot", { node: active, overlay: overlay.node });
}

/** The image at the bottom of the guest's disk chain when the chain is longer than MAX_LAYERS, else null. */
export async function deepChain(vmDir: string): Promise<string | null> {
  const chain = await backingChain(await topFile(vmDir)).catch(() => [] as string[]);
  return chain.length > MAX_LAYERS ? chain.at(-1)! : null;
}

/**
 * Starts collapsing the layers between the guest's disk and its image into the guest's disk, when
 * there are more than MAX_LAYERS; the job runs on in QEMU (settleJobs waits for it).
 */
export async function collapseIfDeep(qmp: Qmp, vmDir: string): Promise<boolean> {
  const image = await deepChain(vmDir);
  if (!image) return false;
  const nodes = await qmp.execute<Array<{ "node-name": string; drv: string; file: string }>>("query-named-block-nodes", { flat: true });
  // A VMM started blank opened its chain through links in its own directory (blank-vmms.ts): the same file.
  const imageId = await fileId(image);
  let base: string | undefined;
  for (const n of nodes) if (n.drv !== "file" && (n.file === image || (imageId !== null && (await fileId(n.file)) === imageId))) base ??= n["node-name"];
  const blocks = await qmp.execute<Array<{ device: string; inserted?: { "node-name": string } }>>("query-block");
  const active = blocks.find((b) => b.device === "root")?.inserted?.["node-name"];
  if (!base || !active) return false;
  // The overlay names the image as its backing by the path the chain gave: a plain path, always.
  await qmp.execute("block-stream", { "job-id": `collapse-${Date.now()}`, device: active, "base-node": base, "backing-file": image });
  return true;
}

/**
 * Waits for a collapse under way to end before the VM's state is saved or its disk moved; one
 * still running after SETTLE_MS is cancelled (what it copied stays, and the next snapshot starts
 * it again).
 */
export async function settleJobs(qmp: Qmp): Promise<void> {
  const jobs = async () => qmp.execute<Array<{ device: string }>>("query-block-jobs");
  const deadline = Date.now() + SETTLE_MS;
  let running = await jobs();
  while (running.length && Date.now() < deadline) {
    await sleep(100);
    running = await jobs();
  }
  for (const j of running) await qmp.execute("block-job-cancel", { device: j.device }).catch(ignore("it ended meanwhile"));
  for (let i = 0; i < 100 && (await jobs()).length; i++) await sleep(100);
}

/** A file's device and inode, or null when it cannot be read. */
async function fileId(path: string): Promise<string | null> {
  const st = await stat(path).catch(() => null);
  return st ? `${st.dev}:${st.ino}` : null;
}
