// Credentials forwarded into a sandbox (docs/security.md, "Credential forwarding"). Nothing is
// forwarded unless a spawn asks.
// - `ssh-agent`: the guest's SSH_AUTH_SOCK is a unix socket the agent listens on, and each
//   connection to it is carried to the ssh agent where the server runs. The guest can ask that
//   agent to sign while the sandbox runs; no private key ever crosses: the agent protocol carries
//   public keys and signatures only.
// - `git`: git in the guest is configured (by environment) with a credential helper that asks
//   the host through another such socket; git-credentials.ts decides what it is told.
import { createConnection } from "node:net";
import { readFile } from "node:fs/promises";
import type { Duplex } from "node:stream";
import { badRequest, ForgevmError } from "../../http/errors.js";
import { FORWARD_KINDS } from "../../schemas/bounds.js";
import { splice, tunnelDuplex } from "../../net/tunnel.js";
import { ignore } from "../../util/ignore.js";
import type { GuestListener } from "../../agent-client/index.js";
import { answerGitCredential, type CredentialFill, MAX_REQUEST } from "./git-credentials.js";
import type { Sandbox } from "./sandbox.js";

/** Where a forwarded ssh agent is in the guest (its SSH_AUTH_SOCK). */
export const GUEST_SSH_AUTH_SOCK = "/run/forgevm/ssh-agent.sock";
/** Where the guest's git credential helper asks the host (agent/helpers/git-credential.c says it too). */
const GUEST_GIT_SOCK = "/run/forgevm/git-credential.sock";
/** Where the helper is put in the guest. */
const GUEST_GIT_HELPER = "/opt/forgevm/bin/git-credential-forgevm";

/**
 * The environment a sandbox's processes get for what it forwards: where ssh and git look for an
 * agent, and git's credential helper (set by environment, so no file of the image is changed).
 */
export function forwardEnv(kinds: string[]): Record<string, string> | undefined {
  const env: Record<string, string> = {};
  if (kinds.includes("ssh-agent")) env.SSH_AUTH_SOCK = GUEST_SSH_AUTH_SOCK;
  if (kinds.includes("git")) Object.assign(env, { GIT_CONFIG_COUNT: "1", GIT_CONFIG_KEY_0: "credential.helper", GIT_CONFIG_VALUE_0: GUEST_GIT_HELPER });
  return Object.keys(env).length ? env : undefined;
}

/** The kinds a spawn asks for, checked: a 400 naming `field` for one that is not forwarded. */
export function checkForward(kinds: unknown, field = "forward"): string[] {
  if (kinds === undefined || kinds === null) return [];
  if (!Array.isArray(kinds)) throw badRequest(`${field}: a list of what to forward (${FORWARD_KINDS.join(", ")})`);
  for (const k of kinds)
    if (!(FORWARD_KINDS as readonly string[]).includes(k)) throw badRequest(`${field}: cannot forward ${JSON.stringify(k)}: what can be forwarded is ${FORWARD_KINDS.join(", ")}`);
  return [...new Set(kinds as string[])];
}

/** What a sandbox's row says it forwards. */
export function forwardOf(row: { forward?: string | null }): string[] {
  return row.forward ? row.forward.split(",") : [];
}

export interface ForwardsOptions {
  /** The host's ssh agent socket (forward.ssh_agent in the config, else the server's SSH_AUTH_SOCK). */
  sshAgentSocket?: string;
  /** The guest's git credential helper binary (paths.gitCredentialHelper). */
  gitHelper: string;
  /** The host's credentials: `git credential fill` as the server's user. */
  fill: CredentialFill;
  /** Whether a sandbox's egress lets it reach a host (Networks.allowsHost). */
  egressAllows: (id: string, host: string, port: number) => boolean;
  /** Says what a guest asked for and was not given (the server's log). */
  refused?: (id: string, why: string) => void;
}

export class Forwards {
  private readonly live = new Map<string, GuestListener[]>();
  /** The helper's bytes, read once (every sandbox that forwards git gets the same). */
  private helper: Promise<Buffer> | null = null;
  /** Each sandbox's last git credential request: the next one waits for it. */
  private readonly asking = new Map<string, Promise<unknown>>();

  constructor(private readonly o: ForwardsOptions) {}

  /** Whether `kinds` can be forwarded here: a 400 saying what is missing when they cannot. */
  require(kinds: string[]): void {
    if (kinds.includes("ssh-agent") && !this.o.sshAgentSocket)
      throw badRequest("forward: ssh-agent needs an ssh agent where the server runs: start the server with SSH_AUTH_SOCK set, or set forward.ssh_agent in its config");
  }

  /** Starts what `kinds` forwards into a running sandbox (again after a resume or a server restart). */
  async attach(sb: Sandbox, kinds: string[]): Promise<void> {
    if (!kinds.length) return;
    this.require(kinds);
    const guest = sb.vm.guest;
    if (!guest.supports("unix-listen")) throw new ForgevmError("CONFLICT", `forward: sandbox ${sb.id}'s agent is older than credential forwarding: spawn it again`);
    this.forget(sb.id);
    await sb.mkdir("/run/forgevm", 0o755);
    const listeners: GuestListener[] = [];
    this.live.set(sb.id, listeners);
    const serve = (path: string, onConn: (inGuest: Duplex) => void) => {
      const l = guest.listen({ path, mode: 0o666 }, (conn) => {
        if (guest.isOpen) onConn(tunnelDuplex(guest.connect({ conn })));
      });
      listeners.push(l);
      return l.listening;
    };
    if (kinds.includes("ssh-agent")) {
      const hostSocket = this.o.sshAgentSocket as string;
      await serve(GUEST_SSH_AUTH_SOCK, (inGuest) => splice(createConnection(hostSocket), inGuest));
    }
    if (kinds.includes("git")) {
      await this.installHelper(sb);
      await serve(GUEST_GIT_SOCK, (inGuest) => void this.answerGit(sb.id, inGuest));
    }
  }

  /** Stops forwarding into a sandbox that stopped running here (paused, stopped, destroyed). */
  forget(id: string): void {
    for (const l of this.live.get(id) ?? []) l.close();
    this.live.delete(id);
    this.asking.delete(id);
  }

  /** Puts the helper where the environment says it is, unless the same one is there already. */
  private async installHelper(sb: Sandbox): Promise<void> {
    this.helper ??= readFile(this.o.gitHelper).catch((): never => {
      this.helper = null; // a later setup may put it there
      throw new ForgevmError("INTERNAL_ERROR", `forward: git needs the guest's credential helper at ${this.o.gitHelper} (run forgevm setup)`);
    });
    const helper = await this.helper;
    const there = await sb.stat(GUEST_GIT_HELPER).catch(() => null);
    if (there?.size === helper.length) return;
    await sb.mkdir("/opt/forgevm/bin", 0o755);
    await sb.writeFile(GUEST_GIT_HELPER, helper, { mode: 0o755 });
  }

  /** Reads one request from the guest's helper, answers it, and closes. */
  private async answerGit(id: string, inGuest: Duplex): Promise<void> {
    inGuest.on("error", ignore("the guest's helper went away: nothing to answer"));
    // Not `for await`: its end destroys the duplex, and with it the way back.
    const request = await new Promise<string | null>((resolve) => {
      let text = "";
      inGuest.on("data", (chunk: Buffer) => {
        text += chunk.toString("utf8");
        if (text.length > MAX_REQUEST) inGuest.destroy();
      });
      inGuest.on("end", () => resolve(text));
      inGuest.on("close", () => resolve(null));
    });
    if (request === null) return;
    // One host `git credential fill` at a time per sandbox: a guest cannot start them by the hundred.
    const before = this.asking.get(id) ?? Promise.resolve();
    const mine = before.then(() => answerGitCredential(request, (host, port) => this.o.egressAllows(id, host, port), this.o.fill));
    this.asking.set(id, mine.catch(ignore("its own caller hears of it")));
    const { answer, refused } = await mine;
    if (refused) this.o.refused?.(id, `git credential: ${refused}`);
    inGuest.end(answer);
  }
}
