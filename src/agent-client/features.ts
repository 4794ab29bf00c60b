// Version-gated features, in one table: which feature of the agent each operation (and each
// optional request field) needs. The agent lists its features in HELLO; the host never sends an
// agent an operation it did not advertise, so an old initramfs fails with a clear error instead
// of a confused guest.
import { PROTOCOL_VERSION, type Hello } from "./messages.js";

/** The feature each operation needs. */
export const OP_FEATURES: Record<string, string> = {
  hello: "exec",
  ping: "exec",
  exec: "exec",
  signal: "exec",
  resize: "pty",
  shutdown: "exec",
  write: "files",
  read: "files",
  stat: "files",
  list: "files",
  mkdir: "files",
  remove: "files",
  move: "files",
  chmod: "files",
  glob: "glob",
  metrics: "metrics",
  configure: "configure",
  listen: "tcp",
  connect: "tcp",
  close: "tcp",
  watch: "watch",
  symlink: "archive",
  sync: "archive",
  freeze: "commit",
  mount: "volumes",
  share: "host-dirs",
  hold: "continue-sessions",
  reclaim: "reclaim",
  procs: "adopt",
  adopt: "adopt",
  killall: "killall",
};

/** The feature an optional field needs, by operation and field. */
export const FIELD_FEATURES: Record<string, Record<string, string>> = {
  exec: { pty: "pty", note: "adopt" },
  configure: { net: "nic" },
  list: { offset: "archive" },
  close: { transfer: "close-transfers" },
  mkdir: { uid: "owned-dirs", gid: "owned-dirs" },
  listen: { path: "unix-listen", mode: "unix-listen", uid: "unix-listen", gid: "unix-listen" },
};

/**
 * The feature each field of the host's HELLO needs: a nonce (restored guests), keeping processes
 * (a resumed pause), carrying every stream over (a resumed pause whose host held the channel).
 */
export const HELLO_FEATURES: Record<string, string> = { nonce: "host-hello", keep: "keep-processes", continue: "continue-sessions" };

/** Why a HELLO cannot be served (another protocol version), or null. */
export function helloProblem(h: Hello): string | null {
  if (h.proto !== PROTOCOL_VERSION) {
    return `the agent in this VM speaks protocol ${h.proto} and this server ${PROTOCOL_VERSION}: rebuild the initramfs (./setup.sh) and start a new sandbox`;
  }
  return null;
}

/** The feature a request needs that the agent did not advertise, or null. */
export function missingFeature(h: Hello, req: { op: string }): string | null {
  const needed = [
    OP_FEATURES[req.op],
    ...Object.entries(FIELD_FEATURES[req.op] ?? {})
      .filter(([field]) => (req as Record<string, unknown>)[field] !== undefined)
      .map(([, f]) => f),
  ];
  return needed.find((f) => f !== undefined && !h.features.includes(f)) ?? null;
}
