// ForgeVM TypeScript SDK.
export { Client, Templates } from "./client.js";
export { Images } from "./images.js";
export { Cluster, ClusterKeys } from "./cluster.js";
export { Environments } from "./environments.js";
export { Volumes } from "./volumes.js";
export { Secrets } from "./secrets.js";
export { Sandbox } from "./sandbox.js";
export { Desktop, type ScreenshotOptions } from "./desktop.js";
export { ExecStream } from "./stream.js";
export {
  AuthenticationError,
  BadRequestError,
  ConflictError,
  ConnectionError,
  ERROR_CLASSES,
  ForbiddenError,
  ForgevmError,
  NotFoundError,
  ProviderError,
  SandboxNotFoundError,
  StorageFullError,
} from "./errors.js";
export { anthropicTools, handleToolCall, openaiTools, type ToolCall, type ToolName } from "./tools.js";
export type * from "./types.js";
