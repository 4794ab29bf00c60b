// E2B template IDs and what they mean here: `base` is the default image, `code-interpreter-v1`
// the built-in code-interpreter image (matplotlib, pandas, Node.js; a ForgeVM template of that
// name wins), `desktop` (what E2B's desktop SDK creates) the desktop image (the same rule),
// `mcp-gateway` (what the SDK asks for with `mcp`) the default image with the MCP gateway put in at
// create unless a template or image has that name, a name the e2b SDK's
// Template.build built (template-builds.ts), anything else a ForgeVM template by name or an image
// reference.
import { ForgevmError } from "../../http/errors.js";
import type { Forge } from "../../core/forge.js";
import { CODE_IMAGE, DESKTOP_IMAGE } from "../../core/forge.js";
import type { SandboxRow } from "../../core/types.js";

export const BASE_TEMPLATE = "base";
export const CODE_INTERPRETER_TEMPLATE = "code-interpreter-v1";
export const MCP_GATEWAY_TEMPLATE = "mcp-gateway";
export const DESKTOP_TEMPLATE = "desktop";

/** The image a template built by the e2b SDK (template-builds.ts) is built into, `name` or `name:tag`. */
export function templateImage(name: string, tag = "latest"): string {
  return `forgevm/e2b-${name}:${tag}`;
}

/** What a spawn names; its size is the image's own where it says one (the desktop image's), else the defaults. */
type SpawnTarget = { image?: string; template?: string };

/** What a spawn for this templateID asks for. */
export async function spawnTarget(forge: Forge, templateID: string): Promise<SpawnTarget> {
  if (templateID === BASE_TEMPLATE) return { image: forge.defaults.image };
  if (templateID === DESKTOP_TEMPLATE) return builtIn(forge, templateID, DESKTOP_IMAGE, "sudo forgevm image system desktop");
  if (templateID === CODE_INTERPRETER_TEMPLATE) return builtIn(forge, templateID, CODE_IMAGE, "./setup.sh");
  if (forge.templates.list().some((t) => t.name === templateID)) return { template: templateID };
  const images = new Set((await forge.images.list()).map((i) => i.name));
  if (images.has(templateID)) return { image: templateID };
  // One built by the e2b SDK's Template.build (template-builds.ts): `name` or `name:tag`.
  const [name, tag] = templateID.split(":");
  if (images.has(templateImage(name, tag))) return { image: templateImage(name, tag) };
  if (templateID === MCP_GATEWAY_TEMPLATE) return { image: forge.defaults.image };
  // A reference that names a registry or a tag is pulled; a bare word is a template that is not there.
  if (/[/:.@]/.test(templateID)) return { image: templateID };
  throw new ForgevmError("NOT_FOUND", `template "${templateID}" not found: use "base", "${CODE_INTERPRETER_TEMPLATE}", a ForgeVM template name or an image reference`);
}

/** A template name that means a built-in image: a ForgeVM template of that name wins, else the image, which `build` makes when the server lacks it. */
async function builtIn(forge: Forge, templateID: string, image: string, build: string): Promise<SpawnTarget> {
  if (forge.templates.list().some((t) => t.name === templateID)) return { template: templateID };
  if (!(await forge.images.list()).some((i) => i.name === image)) {
    // One the server builds itself takes minutes, once, and E2B's SDK gives up on a request after
    // one: the build starts now, and the create is told to come back.
    if (forge.images.canBuild(image)) {
      forge.images.build(image).catch((e) => console.error(`forgevm: ${(e as Error).message}`));
      throw new ForgevmError(
        "UNAVAILABLE",
        `template "${templateID}" needs the image ${image}, which this server is building now (a few minutes, once; its steps are in GET /api/v1/events): try again then`,
      );
    }
    throw new ForgevmError("NOT_FOUND", `template "${templateID}" needs the image ${image}, which this server does not have: run ${build}`);
  }
  return { image };
}

/** The templateID a sandbox answers with. */
export function templateIdOf(forge: Forge, row: SandboxRow): string {
  if (row.template) return row.template;
  if (row.image === forge.defaults.image) return BASE_TEMPLATE;
  if (row.image === CODE_IMAGE) return CODE_INTERPRETER_TEMPLATE;
  if (row.image === DESKTOP_IMAGE) return DESKTOP_TEMPLATE;
  const built = /^forgevm\/e2b-([a-z0-9_-]+):(.+)$/.exec(row.image);
  if (built) return built[2] === "latest" ? built[1] : `${built[1]}:${built[2]}`;
  return row.image;
}
