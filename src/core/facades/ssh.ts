// ssh into sandboxes: what a client asks before it connects (core/guest/ssh.ts does the guest's
// part). The connection itself is a tunnel to the guest's port 22 (network.openPort).
import { badRequest } from "../../http/errors.js";
import { checkPublicKeys, prepareSsh, type SshAccess } from "../guest/ssh.js";
import type { SandboxesFacade } from "./sandboxes.js";

export type { SshAccess } from "../guest/ssh.js";

export class SshFacade {
  // One preparation at a time per sandbox: an scp and an ssh started together would otherwise both
  // copy the server in and start it.
  private readonly preparing = new Map<string, Promise<unknown>>();

  constructor(
    /** The ssh server built for guests (paths.sshServer). */
    private readonly bundleDir: string,
    private readonly sandboxes: Pick<SandboxesFacade, "session">,
  ) {}

  /**
   * Makes a sandbox (resumed first when paused) answer ssh on its port 22 for `user` (default: the
   * sandbox's user) with `publicKeys` authorized; what the client pins and logs in as.
   */
  async prepare(id: string, o: { user?: string; publicKeys: unknown }): Promise<SshAccess> {
    const keys = checkPublicKeys(o.publicKeys);
    const session = await this.sandboxes.session(id, "ssh", { user: o.user, relative: "refuse" });
    const sb = session.sandbox;
    if (sb.tenant) throw badRequest(`ssh: sandbox ${sb.id} shares its VM with other sandboxes; ssh needs a sandbox of its own`);
    const before = this.preparing.get(sb.id) ?? Promise.resolve();
    const mine = before.catch(() => undefined).then(() => prepareSsh(session, keys, this.bundleDir));
    this.preparing.set(sb.id, mine);
    try {
      return await mine;
    } finally {
      if (this.preparing.get(sb.id) === mine) this.preparing.delete(sb.id);
    }
  }
}
