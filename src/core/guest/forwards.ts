// Credentials forwarded into a sandbox (docs/security.md, "Credential forwarding"). `ssh-agent`:
// the guest's SSH_AUTH_SOCK is a unix socket the agent listens on, and each connection to it is
// carried to the ssh agent where the server runs. The guest can ask that agent to sign while the
// sandbox runs; no private key ever crosses: the agent protocol carries public keys and
// signatures only. Nothing is forwarded unless a spawn asks.
import { createConnection } from "node:net";
import { badRequest, ForgevmError } from "../../http/errors.js";
import { splice, tunnelDuplex } from "../../net/tunnel.js";
import type { GuestListener } from "../../agent-client/index.js";
import type { Sandbox } from "./sandbox.js";

/** What a spawn may forward. */
export const FORWARD_KINDS = ["ssh-agent"] as const;
/** Where a forwarded ssh agent is in the guest (its SSH_AUTH_SOCK). */
export const GUEST_SSH_AUTH_SOCK = "/run/forgevm/ssh-agent.sock";

/** The kinds a spawn asks for, checked: a 400 naming `field` for one that is not forwarded. */
export function checkForward(kinds: unknown, field = "forward"): string[] {
  if (kinds === undefined || kinds === null) return [];
  if (!Array.isArray(kinds)) throw badRequest(`${field}: a list of what to forward (${FORWARD_KINDS.join(", ")})`);
  for (const k of kinds) {
    if (k === "git") throw badRequest(`${field}: forwarding git credentials is not supported by this version of ForgeVM; ${FORWARD_KINDS.join(", ")} is`);
    if (!FORWARD_KINDS.includes(k)) throw badRequest(`${field}: cannot forward ${JSON.stringify(k)}: what can be forwarded is ${FORWARD_KINDS.join(", ")}`);
  }
  return [...new Set(kinds as string[])];
}

/** What a sandbox's row says it forwards. */
export function forwardOf(row: { forward?: string | null }): string[] {
  return row.forward ? row.forward.split(",") : [];
}

export class Forwards {
  private readonly live = new Map<string, GuestListener>();

  constructor(
    /** The host's ssh agent socket (forward.ssh_agent in the config, else the server's SSH_AUTH_SOCK). */
    private readonly sshAgentSocket: string | undefined,
  ) {}

  /** Whether ssh-agent forwarding can be asked for here: a 400 saying what is missing when it cannot. */
  require(kinds: string[]): void {
    if (kinds.includes("ssh-agent") && !this.sshAgentSocket)
      throw badRequest("forward: ssh-agent needs an ssh agent where the server runs: start the server with SSH_AUTH_SOCK set, or set forward.ssh_agent in its config");
  }

  /** Starts what `kinds` forwards into a running sandbox (again after a resume or a server restart). */
  async attach(sb: Sandbox, kinds: string[]): Promise<void> {
    if (!kinds.includes("ssh-agent")) return;
    this.require(kinds);
    const guest = sb.vm.guest;
    if (!guest.supports("unix-listen")) throw new ForgevmError("CONFLICT", `forward: sandbox ${sb.id}'s agent is older than ssh-agent forwarding: spawn it again`);
    this.live.get(sb.id)?.close();
    await sb.mkdir("/run/forgevm", 0o755);
    const hostSocket = this.sshAgentSocket as string;
    const listener = guest.listen({ path: GUEST_SSH_AUTH_SOCK, mode: 0o666 }, (conn) => {
      if (!guest.isOpen) return;
      const inGuest = tunnelDuplex(guest.connect({ conn }));
      splice(createConnection(hostSocket), inGuest);
    });
    this.live.set(sb.id, listener);
    await listener.listening;
  }

  /** Stops forwarding into a sandbox that stopped running here (paused, stopped, destroyed). */
  forget(id: string): void {
    this.live.get(id)?.close();
    this.live.delete(id);
  }
}
