// Host side of the guest agent protocol.
export * from "./frame.js";
export * from "./errors.js";
export * from "./messages.js";
export { AgentChannel } from "./channel.js";
export type { ExecSession, BufferedExecResult, DirWatch, ReadFileStream, RequestOptions, Share, Tunnel, GuestListener } from "./channel.js";
export { OP_FEATURES, FIELD_FEATURES, HELLO_FEATURES } from "./features.js";
