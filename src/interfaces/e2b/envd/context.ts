// Who an envd call is for and as whom it runs: the sandbox named by the E2b-Sandbox-Id header
// (the access token proves the caller got it from create or connect), the user named by the
// Basic header or `username` (default: the template's user, else `user` with home /home/user),
// and paths relative to that user's home.
import { GuestSession } from "../../../core/guest/session.js";
import type { FastifyRequest } from "fastify";
import { ForgevmError } from "../../../http/errors.js";
import type { Forge } from "../../../core/forge.js";
import type { FileIdentity, GuestUser, Sandbox } from "../../../core/guest/sandbox.js";
import { ENVD_TOKEN } from "../views.js";
import { ConnectError } from "../connect.js";

export const DEFAULT_USER = "user";
export const DEFAULT_HOME = "/home/user";
export const SANDBOX_HEADER = "e2b-sandbox-id";
export const PORT_HEADER = "e2b-sandbox-port";

/** A sandbox that is not running: E2B's proxy answers 502 (an RPC: unavailable), which the SDKs read as "the sandbox is gone". */
export class SandboxUnavailable extends ConnectError {
  constructor(message: string) {
    super("unavailable", message);
  }
}

/** The call's sandbox and user. */
export interface EnvdContext {
  forge: Forge;
  sandbox: Sandbox;
  user: GuestUser;
  /** Where its processes start unless they say otherwise. */
  cwd: string;
  /** The identity file operations run with (none for root). */
  as?: FileIdentity;
  /** Core's session of the call: the same account, and paths as E2B's SDKs mean them (relative to the home). */
  session: GuestSession;
}

/** The sandbox id a request names (E2b-Sandbox-Id). */
export function sandboxIdOf(req: FastifyRequest): string {
  const id = req.headers[SANDBOX_HEADER];
  if (typeof id !== "string" || !id) throw new ConnectError("invalid_argument", "the E2b-Sandbox-Id header names no sandbox");
  return id;
}

/** The sandbox a request is for, without checking its token (GET /health needs none). */
export function sandboxOf(forge: Forge, req: FastifyRequest): Sandbox {
  const id = sandboxIdOf(req);
  try {
    return forge.sandboxes.running(id);
  } catch (e) {
    throw new SandboxUnavailable(`sandbox ${id} is not running: ${(e as Error).message}`);
  }
}

/**
 * Checks the access token (X-Access-Token) of a request for the sandbox id it names. Tokens are
 * derived from the id, so this comes before the sandbox is looked up: an id that does not exist
 * and a wrong token get the same 401, and no caller learns which ids exist without a token.
 */
export function checkToken(forge: Forge, id: string, req: FastifyRequest): void {
  if (!hasToken(forge, id, req)) {
    throw new ForgevmError("UNAUTHORIZED", "missing or wrong X-Access-Token: use the envdAccessToken that create or connect returned");
  }
}

/** Whether the request carries the envd access token of sandbox `id`. */
export function hasToken(forge: Forge, id: string, req: FastifyRequest): boolean {
  const token = req.headers["x-access-token"];
  return typeof token === "string" && forge.sandboxes.checkAccessToken(id, ENVD_TOKEN, token);
}

/** The user a request names: `username` (files), else the Basic header (RPCs), else none. */
export function userNameOf(req: FastifyRequest, username?: string): string | undefined {
  if (username) return username;
  const auth = req.headers.authorization;
  if (typeof auth === "string" && /^basic /i.test(auth)) {
    const decoded = Buffer.from(auth.slice(6).trim(), "base64").toString("utf8");
    const name = decoded.split(":")[0];
    if (name) return name;
  }
  return undefined;
}

/** Resolves the sandbox (token checked) and the user of an envd call. */
export async function envdContext(forge: Forge, req: FastifyRequest, username?: string): Promise<EnvdContext> {
  const id = sandboxIdOf(req);
  checkToken(forge, id, req);
  // A sandbox paused with auto-resume wakes for the call, which is then served as usual.
  await forge.sandboxes.wake(id, "envd");
  const sandbox = sandboxOf(forge, req);
  // Unnamed, the call is the template's user (the last USER its build set, as E2B persists it) in
  // the template's working directory; without one, `user` in its home.
  const named = userNameOf(req, username);
  const own = sandbox.defaultUser && sandbox.defaultUser !== "root" && sandbox.defaultUser !== "0" ? sandbox.defaultUser : undefined;
  const name = named ?? own ?? DEFAULT_USER;
  const user = name === DEFAULT_USER ? await sandbox.ensureUser(DEFAULT_USER, DEFAULT_HOME) : await sandbox.guestUser(name);
  if (!user) throw new ForgevmError("UNAUTHORIZED", `user "${name}" does not exist in the sandbox`);
  const cwd = (named === undefined || named === own) && sandbox.imageWorkDir ? sandbox.imageWorkDir : user.home;
  const session = new GuestSession(sandbox, user, cwd, "home");
  return { forge, sandbox, user, cwd, as: session.as, session };
}

/** An absolute path: relative ones (and ~) resolve against the user's home (the session's rule for E2B); an empty one is refused. */
export function resolvePath(ctx: EnvdContext, path: unknown, field = "path"): string {
  if (typeof path !== "string" || path === "") throw new ConnectError("invalid_argument", `${field} is required`);
  return ctx.session.resolve(path, field);
}
