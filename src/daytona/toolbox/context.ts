// Whom a toolbox call is for: the sandbox in its path (running, or woken from an idle pause),
// the user the toolbox runs as (the create's `user`), and paths resolved as Daytona's daemon
// resolves them (relative ones against the work directory).
import { posix } from "node:path";
import type { FastifyRequest } from "fastify";
import type { Forge } from "../../core/forge.js";
import type { FileIdentity, GuestUser, Sandbox } from "../../core/guest/sandbox.js";
import { badRequest, conflict, notFound } from "../../http/errors.js";

export interface Toolbox {
  sandbox: Sandbox;
  user: GuestUser;
  /** The identity file operations run with (none for root). */
  as?: FileIdentity;
  workDir: string;
  /** A path as the daemon reads it: absolute as given, relative to the work directory otherwise. */
  resolve(path: string): string;
}

/** The toolbox of the sandbox a request names (`:sandboxId` in its prefix). */
export async function toolboxOf(forge: Forge, req: FastifyRequest): Promise<Toolbox> {
  const id = (req.params as { sandboxId: string }).sandboxId;
  let row: ReturnType<Forge["sandboxes"]["get"]>;
  try {
    row = forge.sandboxes.get(id);
  } catch {
    throw notFound(`Sandbox with ID or name ${id} not found`);
  }
  if (row.state === "destroyed" || row.state === "error") throw notFound(`Sandbox with ID or name ${id} not found`);
  if (row.state === "stopped" || row.state === "created") throw conflict(`sandbox ${id} is stopped: start it first (sandbox.start())`);
  const sandbox = await forge.sandboxes.use(row.id, "daytona");
  const name = row.exec_user ?? "root";
  const user = (await sandbox.guestUser(name)) ?? { name: "root", uid: 0, gid: 0, home: "/root" };
  const workDir = await sandbox.workDir();
  return {
    sandbox,
    user,
    as: user.uid === 0 ? undefined : { uid: user.uid, gid: user.gid },
    workDir,
    resolve: (path) => {
      // The guest's file calls end a name at a NUL: the file would be made under another name than the one answered.
      if (path.includes("\0")) throw badRequest(`path "${path.replaceAll("\0", "\\0").slice(0, 200)}" holds a NUL byte`);
      return posix.resolve(workDir, path);
    },
  };
}
