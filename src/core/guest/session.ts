// One caller's view of a sandbox, the same on every interface: the sandbox (resolved once by id or
// name, its state checked once by core, woken from an idle pause), the guest account the calls run
// as, the identity file operations take, the directory relative paths and commands start from,
// and what a path may be. An interface makes one per call and translates its wire to it.
//
// What may differ between wires is said here and nowhere else: whether a relative path is allowed
// (the ForgeVM API and MCP take absolute paths only; E2B, Daytona and Custom HTTP take relative
// ones) and what it is relative to (E2B's SDKs mean the user's home; Daytona and Custom HTTP the
// working directory).
import { posix } from "node:path";
import { badRequest } from "../../http/errors.js";
import type { FileIdentity, GuestUser, Sandbox } from "./sandbox.js";

/** What a relative path means on a wire: refused, or relative to the session's working directory or to its user's home. */
export type RelativePaths = "refuse" | "workdir" | "home";

export class GuestSession {
  /** The identity file operations run with (none for root). */
  readonly as: FileIdentity | undefined;

  constructor(
    readonly sandbox: Sandbox,
    /** The guest account calls run as. */
    readonly user: GuestUser,
    /** Where commands start, and what relative paths mean under "workdir". */
    readonly workDir: string,
    private readonly relative: RelativePaths,
  ) {
    this.as = user.uid === 0 ? undefined : { uid: user.uid, gid: user.gid };
  }

  /**
   * A path of the guest as this wire means it, or a 400 naming `field`: never with a NUL (the
   * guest's file calls would end the name there, making a file under another name than the one
   * answered); absolute, or relative as the wire says (under "home", `~` and `~/…` are the home too).
   */
  resolve(path: string, field = "path"): string {
    if (this.relative === "refuse") return absoluteGuestPath(path, field);
    refuseNul(path, field);
    // Where relative paths are taken, "" is the directory they are relative to, and a path is read
    // as the wire's own daemon reads it: "." and ".." resolved by name.
    if (this.relative === "workdir") return posix.resolve(this.workDir, path);
    const home = this.user.home;
    if (path === "~") return home;
    if (path.startsWith("~/")) return posix.join(home, path.slice(2));
    return posix.resolve(home, path);
  }
}

/** A guest path on a wire that takes absolute paths only (the ForgeVM API, MCP), or a 400 naming `field`. */
export function absoluteGuestPath(path: string, field = "path"): string {
  refuseNul(path, field);
  if (!path.trim()) throw badRequest(`${field} must not be empty`);
  if (!path.startsWith("/")) throw badRequest(`${field} must be an absolute path, got "${path.slice(0, 200)}"`);
  return path;
}

function refuseNul(path: string, field: string): void {
  if (path.includes("\0")) throw badRequest(`${field} must not contain NUL bytes ("${path.replaceAll("\0", "\\0").slice(0, 200)}")`);
}

/** The account a sandbox's commands run as when a call names none: its default user, else root. */
export async function defaultAccount(sandbox: Sandbox, name: string | undefined): Promise<GuestUser> {
  return (await sandbox.guestUser(name ?? "root")) ?? { name: "root", uid: 0, gid: 0, home: "/root" };
}
