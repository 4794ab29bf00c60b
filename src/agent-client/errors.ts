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

/** A request got no answer within its deadline. */
export class AgentTimeoutError extends Error {
  override name = "AgentTimeoutError";
}
