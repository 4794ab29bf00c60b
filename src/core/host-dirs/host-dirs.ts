// Live host directories in sandboxes: a directory of this host mounted at a path in the guest,
// at spawn (`-v /host/dir:/path[:ro]`) or into a running sandbox (`forgevm mount`). Only inside
// the directories the operator allows (`mounts.host_dirs`, none by default), resolved with their
// links first. The guest mounts FUSE and the host answers its requests (fuse/server.ts), so
// changes on either side show on the other at once, and nothing the guest asks can reach past
// the directory. A sandbox's host directories are in its row: a start or resume mounts them again.
import { realpath, stat } from "node:fs/promises";
import { posix, sep } from "node:path";
import type { Share } from "../../agent-client/index.js";
import type { HostDirMount, SandboxStore } from "../../store/sandboxes.js";
import { badRequest, conflict, ForgevmError, notFound } from "../../http/errors.js";
import type { Sandbox } from "../guest/sandbox.js";
import { serveShare } from "../../fuse/server.js";
import { ignore } from "../../util/ignore.js";

const MAX_MOUNTS = 16;

/** "/host/dir:/path" or "/host/dir:/path:ro": names a host directory rather than a volume. */
export function isHostDirSpec(spec: string): boolean {
  return typeof spec === "string" && (spec.startsWith("/") || spec.startsWith("./") || spec.startsWith("../") || spec.startsWith("~"));
}

export class HostDirs {
  private readonly live = new Map<string, Map<string, Share>>(); // sandbox → guest path → share

  constructor(
    /** The directories sandboxes may mount from (and below), as the operator wrote them. */
    private readonly allowed: string[],
    private readonly rows: SandboxStore,
  ) {}

  /** Checks a mount: the host directory exists, is a directory, and lies inside an allowed one. */
  async check(host: string, path: string, readOnly: boolean): Promise<HostDirMount> {
    if (!this.allowed.length) {
      throw new ForgevmError("FORBIDDEN", `host directories are off on this server: list the directories sandboxes may mount in mounts.host_dirs (config)`, {
        rule: "mounts.host_dirs",
      });
    }
    if (!host.startsWith("/")) throw badRequest(`volumes: the host directory "${host}" must be an absolute path`);
    const real = await realpath(host).catch(() => {
      throw badRequest(`volumes: the host directory ${host} does not exist`);
    });
    if (!(await stat(real)).isDirectory()) throw badRequest(`volumes: ${host} is not a directory`);
    let inside = false;
    for (const a of this.allowed) {
      const root = await realpath(a).catch(() => null);
      if (root && (real === root || real.startsWith(root.endsWith(sep) ? root : `${root}${sep}`))) inside = true;
    }
    if (!inside) {
      throw new ForgevmError("FORBIDDEN", `volumes: ${host} is not inside a directory this server lets sandboxes mount (mounts.host_dirs: ${this.allowed.join(", ")})`, {
        rule: "mounts.host_dirs",
      });
    }
    if (!path.startsWith("/")) throw badRequest(`volumes: the mount point "${path}" must be an absolute path`);
    const norm = posix.normalize(path).replace(/\/+$/, "");
    if (!norm || /^\/(proc|sys|dev)(\/|$)/.test(norm)) throw badRequest(`volumes: cannot mount over ${norm || "/"}`);
    return { host: real, path: norm, read_only: readOnly };
  }

  /** Mounts a host directory into a running sandbox (again, after a start or resume). */
  async attach(sb: Sandbox, m: HostDirMount): Promise<void> {
    const mine = this.live.get(sb.id) ?? new Map<string, Share>();
    if (mine.has(m.path)) return;
    const st = await stat(m.host).catch(() => null);
    if (!st?.isDirectory()) throw conflict(`host directory ${m.host} is gone`);
    const s = sb.vm.guest.share({ path: m.path, readonly: m.read_only });
    await s.mounted.catch((e: Error) => {
      throw badRequest(`volumes: ${m.host} could not be mounted at ${m.path}: ${e.message}`);
    });
    mine.set(m.path, s);
    this.live.set(sb.id, mine);
    const owner = process.getuid?.() === 0 ? { uid: st.uid, gid: st.gid } : undefined;
    void serveShare(s.requests, s.replies, { root: m.host, readOnly: m.read_only, owner })
      .catch(ignore("the share's end is reported by its stream"))
      .finally(() => s.close());
    void s.done.catch(ignore("the share's end is reported by its stream")).finally(() => {
      if (this.live.get(sb.id)?.get(m.path) === s) this.live.get(sb.id)!.delete(m.path);
    });
  }

  /** Mounts a host directory into a running sandbox and records it, as `forgevm mount` does. */
  async mount(sb: Sandbox, host: string, path: string, readOnly: boolean): Promise<HostDirMount[]> {
    const m = await this.check(host, path, readOnly);
    const row = this.rows.get(sb.id);
    const current = row?.host_dirs ?? [];
    if (current.some((x) => x.path === m.path) || row?.volumes?.some((v) => v.path === m.path)) throw conflict(`something is mounted at ${m.path} already`);
    if (current.length >= MAX_MOUNTS) throw badRequest(`at most ${MAX_MOUNTS} host directories per sandbox`);
    await this.attach(sb, m);
    const next = [...current, m];
    this.rows.setHostDirs(sb.id, next);
    return next;
  }

  /** Unmounts a host directory from a running sandbox (processes inside it see it gone). */
  async unmount(sb: Sandbox, path: string): Promise<HostDirMount[]> {
    const norm = posix.normalize(path).replace(/\/+$/, "");
    const current = this.rows.get(sb.id)?.host_dirs ?? [];
    if (!current.some((m) => m.path === norm)) throw notFound(`no host directory is mounted at ${norm} in sandbox ${sb.id}`);
    const s = this.live.get(sb.id)?.get(norm);
    s?.close();
    await s?.done.catch(ignore("the share's end is reported by its stream"));
    this.live.get(sb.id)?.delete(norm);
    const next = current.filter((m) => m.path !== norm);
    this.rows.setHostDirs(sb.id, next);
    return next;
  }

  /** Forgets a sandbox whose VM is gone (its mounts went with it). */
  forget(id: string): void {
    for (const s of this.live.get(id)?.values() ?? []) s.close();
    this.live.delete(id);
  }
}
