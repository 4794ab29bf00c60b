// Snapshots to another host and back: an archive of a named snapshot (its migration stream, its
// whole disk as one qcow2, its console log and a description), and the import that makes a
// snapshot of it here. The disk travels whole: two hosts' copies of an image are not the same
// bytes (each host builds its own ext4, with its own UUID and hash seed), so an overlay over the
// image would not survive the trip. The importing host needs the same VMM build and
// accelerator, since a running machine's memory only loads into the machine that saved it.
import { createWriteStream } from "node:fs";
import { chmod, mkdtemp, readFile, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import { resolveImage } from "../../images/store.js";
import type { SnapshotRow } from "../../store/snapshots.js";
import { readTar, safeEntryPath, TarError } from "../../util/tar-read.js";
import { TAR_END, tarFileBody, tarHeader, tarPadding } from "../../util/tar-write.js";
import { run } from "../../util/process.js";
import type { Paths } from "../../config/paths.js";
import type { Provider } from "../../providers/provider.js";
import type { SnapshotStore } from "../../store/snapshots.js";
import type { EventBus } from "../events.js";
import { badRequest, conflict } from "../../http/errors.js";
import { Snapshots } from "./snapshots.js";
import { ignore } from "../../util/ignore.js";

const FORMAT = "forgevm-snapshot/1";

/** What an exported snapshot says about itself. */
export interface SnapshotDescription {
  format: typeof FORMAT;
  name: string | null;
  image: { name: string; digest: string | null };
  memory_mb: number;
  vcpus: number;
  disk_mb: number;
  disk_bytes: number;
  env: Record<string, string> | null;
  exec_user: string | null;
  nic: boolean;
  /** The VMM build and accelerator the memory belongs to. */
  machine: string;
  created_at: string;
}

function fileEntry(name: string, size: number): Buffer {
  return tarHeader({ path: name, type: "file", mode: 0o600, size, mtime: Math.floor(Date.now() / 1000) });
}

/** A named snapshot as an archive stream, with the file name it is offered under. */
/** What moving a snapshot between hosts takes: the data directory, the default provider's machine key, the snapshots and their rows, and where the event goes. */
export interface TransferDeps {
  readonly paths: Paths;
  readonly provider: Pick<Provider, "machineKey">;
  readonly snapshotRows: Pick<SnapshotStore, "find">;
  readonly snaps: Pick<Snapshots, "begin" | "finish" | "abort">;
  readonly events: Pick<EventBus, "emit">;
}

export async function exportSnapshot(core: TransferDeps, row: SnapshotRow): Promise<{ stream: Readable; filename: string }> {
  if (row.kind !== "sandbox" || row.state !== "ready")
    throw conflict(`snapshot ${row.name ?? row.id} is a ${row.kind} snapshot (${row.state}): only named snapshots a sandbox took can be exported`);
  const files = Snapshots.files(row);
  if (!files.disk || !row.disk_bytes) throw conflict(`snapshot ${row.id} has no disk`);
  const image = await resolveImage(core.paths, row.image).catch(() => null);
  const desc: SnapshotDescription = {
    format: FORMAT,
    name: row.name,
    image: { name: row.image, digest: image?.digest ?? null },
    memory_mb: row.memory_mb,
    vcpus: row.vcpus,
    disk_mb: row.disk_mb,
    disk_bytes: row.disk_bytes,
    env: row.env,
    exec_user: row.exec_user,
    nic: !!row.nic,
    machine: await core.provider.machineKey(),
    created_at: row.created_at,
  };
  // The disk chain (image, base snapshot, earlier overlays) merged into one standalone disk.
  const work = await mkdtemp(join(core.paths.dataDir, ".snapshot-export-"));
  try {
    const disk = join(work, "disk.qcow2");
    await run("qemu-img", ["convert", "-U", "-O", "qcow2", files.disk, disk]);
    const parts: [string, string | Buffer][] = [
      ["snapshot.json", Buffer.from(JSON.stringify(desc, null, 2))],
      ["state", files.state],
      ["disk.qcow2", disk],
      ["console.log", files.console ?? ""],
    ];
    const sizes = await Promise.all(
      parts.map(async ([, f]) =>
        Buffer.isBuffer(f)
          ? f.length
          : await stat(f).then(
              (s) => s.size,
              () => -1,
            ),
      ),
    );
    const stream = Readable.from(
      (async function* () {
        try {
          for (const [i, [name, f]] of parts.entries()) {
            if (sizes[i] < 0) continue;
            yield fileEntry(name, sizes[i]);
            if (Buffer.isBuffer(f)) {
              yield f;
              const pad = tarPadding(sizes[i]);
              if (pad.length) yield pad;
            } else yield* tarFileBody(f, sizes[i]);
          }
          yield TAR_END;
        } finally {
          await rm(work, { recursive: true, force: true });
        }
      })(),
    );
    return { stream, filename: `${(row.name ?? row.id).replace(/[^A-Za-z0-9._-]+/g, "_")}.snapshot.tar` };
  } catch (e) {
    await rm(work, { recursive: true, force: true });
    throw e;
  }
}

/** Makes a snapshot here from an exported archive; `name` replaces the one it carries. */
export async function importSnapshot(core: TransferDeps, source: AsyncIterable<Buffer>, name: string | undefined): Promise<SnapshotRow> {
  const work = await mkdtemp(join(core.paths.dataDir, ".snapshot-import-"));
  try {
    const wanted = new Set(["snapshot.json", "state", "disk.qcow2", "console.log"]);
    try {
      for await (const { entry, body } of readTar(source)) {
        const rel = safeEntryPath(entry.path);
        if (entry.type !== "file" || rel === null || !wanted.has(rel)) {
          for await (const _ of body) {
            // not ours: skipped
          }
          continue;
        }
        await pipeline(Readable.from(body), createWriteStream(join(work, rel), { mode: 0o600 }));
      }
    } catch (e) {
      if (e instanceof TarError) throw badRequest(`the body is not a snapshot archive: ${e.message}`);
      throw e;
    }
    let desc: SnapshotDescription;
    try {
      desc = JSON.parse(await readFile(join(work, "snapshot.json"), "utf8"));
    } catch {
      throw badRequest("the archive has no snapshot.json: it is not a snapshot exported by forgevm snapshot export");
    }
    if (desc.format !== FORMAT) throw badRequest(`the archive is ${String(desc.format)}, this server reads ${FORMAT}`);
    for (const f of ["state", "disk.qcow2"]) if (!(await stat(join(work, f)).catch(() => null))) throw badRequest(`the archive has no ${f}`);
    const machine = await core.provider.machineKey();
    if (desc.machine !== machine) {
      throw conflict(
        `the snapshot's memory was saved by another VMM build or accelerator (${desc.machine}; here ${machine}): it can only be restored on a host like the one that took it`,
      );
    }
    const finalName = name ?? desc.name;
    if (finalName !== null && core.snapshotRows.find(finalName)) throw conflict(`a snapshot named "${finalName}" already exists (give the import another --name)`);
    if (typeof desc.image?.name !== "string" || !Number.isInteger(desc.memory_mb) || !Number.isInteger(desc.vcpus) || !Number.isInteger(desc.disk_bytes)) {
      throw badRequest("snapshot.json in the archive is incomplete");
    }
    // The image is only a name here (the disk is whole): a commit of a restored sandbox needs it.
    const row = await core.snaps.begin({
      kind: "sandbox",
      name: finalName,
      image: desc.image.name,
      template: null,
      memory_mb: desc.memory_mb,
      vcpus: desc.vcpus,
      disk_mb: desc.disk_mb,
      format: "stream",
      nic: desc.nic,
      env: desc.env,
      exec_user: desc.exec_user,
    });
    try {
      for (const f of ["state", "disk.qcow2", "console.log"])
        await rename(join(work, f), join(row.dir, f)).catch(ignore("a file the archive did not hold; the check below names what is missing"));
      const info = JSON.parse((await run("qemu-img", ["info", "--output=json", join(row.dir, "disk.qcow2")])).stdout) as {
        format?: string;
        "backing-filename"?: string;
        "format-specific"?: { data?: { "data-file"?: string } };
      };
      // A disk that names a backing or data file would read a file of the archive's choosing: refused.
      if (info.format !== "qcow2" || info["backing-filename"] || info["format-specific"]?.data?.["data-file"]) {
        throw badRequest("the snapshot's disk must be one standalone qcow2 image (no backing or data file)");
      }
      await run("qemu-img", ["check", "-q", join(row.dir, "disk.qcow2")]).catch((e) => {
        throw badRequest(`the snapshot's disk is damaged: ${(e as Error).message.split("\n").slice(-1)[0]}`);
      });
      for (const f of ["state", "disk.qcow2"]) await chmod(join(row.dir, f), 0o444);
      const finished = await core.snaps.finish(row, {
        files: { state: join(row.dir, "state"), disk: join(row.dir, "disk.qcow2"), diskBytes: desc.disk_bytes },
        pauseMs: 0,
        bytes: 0,
      });
      core.events.emit("snapshot.imported", null, { snapshot_id: row.id, image: desc.image.name });
      return finished;
    } catch (e) {
      await core.snaps.abort(row);
      throw e;
    }
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
