// ForgeVM TypeScript SDK.
export { Client, Templates } from "./client.js";
export { Sandbox } from "./sandbox.js";
export { ExecStream } from "./stream.js";
export { AuthenticationError, BadRequestError, ConflictError, ConnectionError, ForgevmError, NotFoundError, ProviderError, SandboxNotFoundError } from "./errors.js";
export { anthropicTools, handleToolCall, openaiTools, type ToolCall, type ToolName } from "./tools.js";
export type * from "./types.js";
