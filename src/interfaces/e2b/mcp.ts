// `mcp` at create, in E2B's shape: which servers a sandbox's MCP gateway is to serve. The SDK
// itself starts the gateway once create answers (`mcp-gateway --config …` as root); this server
// checks the configuration first, so that a server it cannot serve is a 400 naming it instead of
// a sandbox that dies on start, and puts the gateway program into the sandbox.
import { badRequest } from "../../http/errors.js";

/** E2B's `github/<owner>/<repo>` servers: a repository in the image (or cloned) run as a stdio server. */
const GITHUB_SERVER = /^github\/[A-Za-z0-9_-][A-Za-z0-9_.-]*\/[A-Za-z0-9_-][A-Za-z0-9_.-]*$/;

/** Checks E2B's `mcp` field; returns whether one was given. */
export function checkMcp(mcp: unknown): boolean {
  if (mcp === undefined || mcp === null) return false;
  if (typeof mcp !== "object" || Array.isArray(mcp)) throw badRequest("mcp must be an object of MCP servers by name");
  for (const [name, spec] of Object.entries(mcp)) {
    if (!GITHUB_SERVER.test(name)) {
      throw badRequest(
        `mcp.${name}: ${name.startsWith("github/") ? "not a github/<owner>/<repo> name" : "catalogue servers run from the Docker MCP catalogue and need the internet, which this self-hosted gateway does not use"}; it serves github/<owner>/<repo> servers from the image (see docs/e2b.md)`,
      );
    }
    if (typeof spec !== "object" || spec === null || Array.isArray(spec)) throw badRequest(`mcp.${name} must be an object with runCmd`);
    const s = spec as Record<string, unknown>;
    if (typeof s.runCmd !== "string" || !s.runCmd.trim()) throw badRequest(`mcp.${name}.runCmd is required: a command that starts a stdio MCP server`);
    if (s.installCmd !== undefined && typeof s.installCmd !== "string") throw badRequest(`mcp.${name}.installCmd must be a string`);
    if (s.envs !== undefined) {
      if (typeof s.envs !== "object" || s.envs === null || Array.isArray(s.envs)) throw badRequest(`mcp.${name}.envs must be an object of strings`);
      for (const [k, v] of Object.entries(s.envs)) if (typeof v !== "string") throw badRequest(`mcp.${name}.envs.${k} must be a string`);
    }
  }
  return true;
}
