// Whom a toolbox call is for: the sandbox in its path (running, or woken from an idle pause),
// the user the toolbox runs as (the create's `user`), and paths resolved as Daytona's daemon
// resolves them (relative ones against the work directory).
import type { FastifyRequest } from "fastify";
import type { Forge } from "../../../core/forge.js";
import type { FileIdentity, GuestUser, Sandbox } from "../../../core/guest/sandbox.js";
import { toApiError } from "../../../core/error-map.js";
import { notFound } from "../../../http/errors.js";

export interface Toolbox {
  sandbox: Sandbox;
  user: GuestUser;
  /** The identity file operations run with (none for root). */
  as?: FileIdentity;
  workDir: string;
  /** A path as the daemon reads it: absolute as given, relative to the work directory otherwise. */
  resolve(path: string): string;
}

/** The toolbox of the sandbox a request names (`:sandboxId` in its prefix): core's session, under Daytona's words for a sandbox it cannot find. */
export async function toolboxOf(forge: Forge, req: FastifyRequest): Promise<Toolbox> {
  const id = (req.params as { sandboxId: string }).sandboxId;
  const session = await forge.sandboxes.session(id, "daytona", { relative: "workdir" }).catch((e) => {
    if (toApiError(e).status === 404) throw notFound(`Sandbox with ID or name ${id} not found`);
    throw e;
  });
  return { sandbox: session.sandbox, user: session.user, as: session.as, workDir: session.workDir, resolve: (path) => session.resolve(path) };
}
