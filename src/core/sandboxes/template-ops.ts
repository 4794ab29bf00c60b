// Templates: named spawn settings. Creating, changing or deleting one also remakes its base
// snapshots and warm pool.
import type { TemplateBody, TemplateRow } from "../../store/templates.js";
import { NO_TTL, parseIdle, parseTtl, ttlSeconds as checkTtlSeconds } from "../../schemas/durations.js";
import type { Core } from "../core.js";
import { toForgevmError } from "../error-map.js";
import { badRequest, ForgevmError, notFound } from "../../http/errors.js";
import { parseImageReference } from "../images/images.js";
import { checkMemory, checkProvider, checkVcpus } from "./validate.js";
import { checkEnv } from "../../schemas/checks.js";
import { checkDecls } from "./secrets.js";
import type { Pull } from "./spawn-setup.js";
import { configurePools } from "./spawn.js";

/** A template as a client or the config file writes it, with the original SDKs' aliases. */
export interface TemplateInput extends Omit<TemplateBody, "cpu_cores" | "ttl_seconds"> {
  cpu_cores?: number;
  vcpus?: number;
  ttl_seconds?: number;
  ttl?: string | number;
  created_at?: string;
  updated_at?: string;
}

/** What is stored of a template input: vcpus and ttl are other names of cpu_cores and ttl_seconds; timestamps are the server's. */
export function templateBody(t: TemplateInput): TemplateBody {
  const ttl = typeof t.ttl === "string" ? parseTtl(t.ttl, "ttl") : undefined;
  const given = t.ttl_seconds ?? (typeof t.ttl === "number" ? t.ttl : ttl === undefined ? undefined : ttl === NO_TTL ? 0 : Math.ceil(ttl / 1000));
  // One check for every way in (the API, the config file): a TTL that no spawn could use is refused here.
  const ttlSeconds = given === undefined ? undefined : checkTtlSeconds(given, t.ttl_seconds !== undefined ? "ttl_seconds" : "ttl");
  return {
    name: t.name,
    version: t.version,
    image: t.image,
    description: t.description,
    setup: t.setup,
    memory_mb: t.memory_mb,
    cpu_cores: t.cpu_cores ?? t.vcpus,
    ttl_seconds: ttlSeconds,
    env: t.env,
    allowed_hosts: t.allowed_hosts?.length ? t.allowed_hosts : undefined,
    egress_rules: t.egress_rules && Object.keys(t.egress_rules).length ? t.egress_rules : undefined,
    secrets: t.secrets?.length ? t.secrets : undefined,
    pool_size: t.pool_size,
    // Checked here, once for every way in; stored as written.
    idle: t.idle ? checkedIdle(t.idle) : undefined,
    forkable: t.forkable || undefined,
    provider: t.provider || undefined,
    metadata: t.metadata && Object.keys(t.metadata).length ? t.metadata : undefined,
  };
}

/**
 * Makes the stored templates agree with the config file's: a missing one is created, a changed
 * one replaced (its base snapshot and warm pool are remade), an unchanged one left alone.
 * Templates made through the API stay. Returns the names created or replaced.
 */
export async function applyTemplates(core: Core, wanted: TemplateBody[], pull: Pull): Promise<string[]> {
  const changed: string[] = [];
  for (const t of wanted) {
    const stored = core.templates.get(t.name);
    try {
      if (t.provider) t.provider = checkProvider(core, t.provider, "provider").name; // compared as it is stored
      if (stored) {
        const { created_at: _c, updated_at: _u, ...body } = stored;
        if (sameBody(body, t)) continue;
        await replaceTemplate(core, t, pull);
      } else {
        await createTemplate(core, t, pull);
      }
    } catch (e) {
      const err = toForgevmError(e);
      throw new ForgevmError(err.code, `template ${t.name}: ${err.message}`);
    }
    changed.push(t.name);
  }
  return changed;
}

function sameBody(a: TemplateBody, b: TemplateBody): boolean {
  const norm = (t: TemplateBody) =>
    JSON.stringify(
      Object.fromEntries(
        Object.entries(t)
          .filter(([, v]) => v !== undefined)
          .sort(([x], [y]) => x.localeCompare(y)),
      ),
    );
  return norm(a) === norm(b);
}

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
  // Stored by the name of the provider that serves it (the ForgeVM API's "firecracker" is "qemu" here).
  if (t.provider) t.provider = checkProvider(core, t.provider, "provider").name;
  checkEnv(t.env, "env");
  if (t.cpu_cores !== undefined) checkVcpus(core, t.cpu_cores, "cpu_cores");
  if (t.memory_mb !== undefined) checkMemory(core, t.memory_mb, "memory_mb");
  if (t.image && !t.image.startsWith("forgevm/")) parseImageReference(t.image);
  try {
    core.networks.plan({}, { allow: t.allowed_hosts });
  } catch (e) {
    throw badRequest(`allowed_hosts: ${(e as Error).message}`);
  }
  // Their shape and destinations; the secrets they name are looked up by the proxy at each request (one may be added later).
  if (t.egress_rules) {
    if (!t.allowed_hosts?.length) throw badRequest("egress_rules need allowed_hosts: only the egress proxy of an allowlisted sandbox can add headers");
    core.networks.plan({ mode: "allowlist", allow: t.allowed_hosts, rules: t.egress_rules });
  }
}

/** A template's idle policy, checked (a 400 naming `idle`) and kept as written. */
function checkedIdle(idle: { after: string; action?: "pause" | "stop" | "none" }): { after: string; action: "pause" | "stop" | "none" } {
  return { after: idle.after, action: parseIdle(idle, "idle").action };
}
