// Errors raised by the host side of the guest protocol.

/** The guest agent answered a request with an error (code is an errno name such as ENOENT). */
export class AgentError extends Error {
  override name = "AgentError";
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The channel to the guest is gone (VM stopped, socket closed, or the guest broke the protocol). */
export class ChannelClosedError extends Error {
  override name = "ChannelClosedError";
}

/**
 * The host let go of the channel on purpose: its server is stopping and leaves the VM running,
 * with every process, for the next server to take back. Streams in flight end with this.
 */
export class HostLeftError extends ChannelClosedError {
  override name = "HostLeftError";
}

/** A request got no answer within its deadline. */
export class AgentTimeoutError extends Error {
  override name = "AgentTimeoutError";
}
