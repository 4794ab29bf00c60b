// Templates: named spawn settings. Creating, changing or deleting one also remakes its base
// snapshots and warm pool.
import type { TemplateBody, TemplateRow } from "../store/templates.js";
import type { Core } from "./core.js";
import { badRequest, notFound } from "./errors.js";
import { parseImageReference } from "./images.js";
import { checkEnv, checkProvider, checkVcpus } from "./validate.js";
import { checkDecls } from "./secrets.js";
import { configurePools, type Pull } from "./spawn.js";

/** A stored template; 404 when there is none of that name. */
export function getTemplate(core: Core, name: string): TemplateRow {
  const t = core.templates.get(name);
  if (!t) throw notFound(`template "${name}" not found`);
  return t;
}

/** Stores a new template (false when the name is taken) and starts its warm pool. */
export async function createTemplate(core: Core, t: TemplateBody, pull: Pull): Promise<boolean> {
  checkTemplate(core, t);
  if (!core.templates.create(t)) return false;
  await configurePools(core, pull);
  return true;
}

/** Replaces a template; its base snapshots and warm VMs are remade from the new definition. */
export async function replaceTemplate(core: Core, t: TemplateBody, pull: Pull): Promise<boolean> {
  checkTemplate(core, t);
  if (!core.templates.replace(t)) return false;
  await core.snaps.dropBases((r) => r.template === t.name);
  await configurePools(core, pull);
  return true;
}

/** Deletes a template with its base snapshots and warm VMs. */
export async function deleteTemplate(core: Core, name: string, pull: Pull): Promise<boolean> {
  if (!core.templates.delete(name)) return false;
  await core.snaps.dropBases((r) => r.template === name);
  await configurePools(core, pull);
  return true;
}

/** Refuses a template no spawn could use, naming the field, before it is stored. */
function checkTemplate(core: Core, t: TemplateBody): void {
  checkDecls(t.secrets ?? []);
  checkProvider(core, t.provider, "provider");
  checkEnv(t.env, "env");
  if (t.cpu_cores !== undefined) checkVcpus(core, t.cpu_cores, "cpu_cores");
  if (t.image && !t.image.startsWith("forgevm/")) parseImageReference(t.image);
  try {
    core.networks.plan({}, { allow: t.allowed_hosts });
  } catch (e) {
    throw badRequest(`allowed_hosts: ${(e as Error).message}`);
  }
}
