// The REST shapes of ssh into a sandbox (docs/ssh.md): what a client asks before it connects, and
// what it is told to pin and log in as.
import { Type } from "typebox";
import { Body } from "./rest.js";

export const SshRequest = Body(
  {
    public_keys: Type.Array(Type.String({ minLength: 1, maxLength: 16_384 }), {
      minItems: 1,
      maxItems: 32,
      description: "OpenSSH public key lines (as in ~/.ssh/id_*.pub) to authorize for the account",
    }),
    user: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: "the guest account to log in as (default: the sandbox's user, else root)" })),
  },
  { $id: "SshRequest" },
);

export const SshAccess = Type.Object(
  {
    user: Type.String({ description: "the account the keys were authorized for" }),
    host_keys: Type.Array(Type.String(), { description: "the guest sshd's public host keys (known_hosts key fields), to pin before connecting" }),
    port: Type.Integer({ description: "the guest port sshd answers on; GET /sandboxes/{id}/tcp/{port} reaches it" }),
    server: Type.Union([Type.Literal("forgevm"), Type.Literal("image")], { description: "whose sshd answers: the one ForgeVM brought into the guest, or the image's own" }),
  },
  { $id: "SshAccess" },
);
