// Library entry point of the ForgeVM server package.
export { Forge, SPAWN_DEFAULTS, type ForgeOptions, type SpawnOptions } from "./core/forge.js";
export { Sandbox, type ExecOptions, type ExecOutput } from "./core/guest/sandbox.js";
export { DEFAULT_IMAGE } from "./images/store.js";
export { BootError } from "./providers/provider.js";
export { AgentError, ChannelClosedError } from "./agent-client/index.js";
