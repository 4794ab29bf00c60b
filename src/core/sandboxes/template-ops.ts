// Templates: named spawn settings. Creating, changing or deleting one also remakes its base
// snapshots and warm pool.
import { checkForward } from "../guest/forwards.js";
import type { TemplateBody, TemplateRow } from "../../store/templates.js";
import { NO_TTL, parseIdle, parseTtl, ttlSeconds as checkTtlSeconds } from "../../schemas/durations.js";
import type { TemplateStore } from "../../store/templates.js";
import type { Providers } from "../providers.js";
import type { Networks } from "../network.js";
import type { Snapshots } from "../snapshots/snapshots.js";
import type { Spawner } from "./spawn.js";
import { toForgevmError } from "../error-map.js";
import { badRequest, ForgevmError, notFound } from "../../http/errors.js";
import { parseImageReference } from "../images/images.js";
import { checkMemory, checkVcpus } from "./validate.js";
import { checkEnv } from "../../schemas/checks.js";
import { checkDecls } from "./secrets.js";

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
    forward: t.forward?.length ? checkForward(t.forward) : undefined,
    system: t.system,
    provider: t.provider || undefined,
    metadata: t.metadata && Object.keys(t.metadata).length ? t.metadata : undefined,
  };
}

/** What templates take: their store, the checks a spawn of them would meet, and the base snapshots and warm pools made from them. */
export interface TemplateOpsDeps {
  readonly templates: TemplateStore;
  readonly providers: Providers;
  readonly networks: Pick<Networks, "plan">;
  readonly snaps: Pick<Snapshots, "dropBases">;
  readonly spawner: Pick<Spawner, "configurePools">;
}

/** Stores, replaces and deletes templates, with their base snapshots and warm pools. */
export class TemplateOps {
  constructor(private readonly d: TemplateOpsDeps) {}

  /**
   * Makes the stored templates agree with the config file's: a missing one is created, a changed
   * one replaced (its base snapshot and warm pool are remade), an unchanged one left alone.
   * Templates made through the API stay. Returns the names created or replaced.
   */
  async applyTemplates(wanted: TemplateBody[]): Promise<string[]> {
    const changed: string[] = [];
    for (const t of wanted) {
      const stored = this.d.templates.get(t.name);
      try {
        if (t.provider) t.provider = this.d.providers.pick(t.provider, "provider").name; // compared as it is stored
        if (stored) {
          const { created_at: _c, updated_at: _u, ...body } = stored;
          if (sameBody(body, t)) continue;
          await this.replaceTemplate(t);
        } else {
          await this.createTemplate(t);
        }
      } catch (e) {
        const err = toForgevmError(e);
        throw new ForgevmError(err.code, `template ${t.name}: ${err.message}`);
      }
      changed.push(t.name);
    }
    return changed;
  }

  /** A stored template; 404 when there is none of that name. */
  getTemplate(name: string): TemplateRow {
    const t = this.d.templates.get(name);
    if (!t) throw notFound(`template "${name}" not found`);
    return t;
  }

  /** Stores a new template (false when the name is taken) and starts its warm pool. */
  async createTemplate(t: TemplateBody): Promise<boolean> {
    this.checkTemplate(t);
    if (!this.d.templates.create(t)) return false;
    await this.d.spawner.configurePools();
    return true;
  }

  /** Replaces a template; its base snapshots and warm VMs are remade from the new definition. */
  async replaceTemplate(t: TemplateBody): Promise<boolean> {
    this.checkTemplate(t);
    if (!this.d.templates.replace(t)) return false;
    await this.d.snaps.dropBases((r) => r.template === t.name);
    await this.d.spawner.configurePools();
    return true;
  }

  /** Deletes a template with its base snapshots and warm VMs. */
  async deleteTemplate(name: string): Promise<boolean> {
    if (!this.d.templates.delete(name)) return false;
    await this.d.snaps.dropBases((r) => r.template === name);
    await this.d.spawner.configurePools();
    return true;
  }

  /** Refuses a template no spawn could use, naming the field, before it is stored. */
  private checkTemplate(t: TemplateBody): void {
    checkDecls(t.secrets ?? []);
    // Stored by the name of the provider that serves it (the ForgeVM API's "firecracker" is "qemu" here).
    if (t.provider) t.provider = this.d.providers.pick(t.provider, "provider").name;
    checkEnv(t.env, "env");
    if (t.cpu_cores !== undefined) checkVcpus(this.d.providers.default, t.cpu_cores, "cpu_cores");
    if (t.memory_mb !== undefined) checkMemory(this.d.providers.default, t.memory_mb, "memory_mb");
    if (t.image && !t.image.startsWith("forgevm/")) parseImageReference(t.image);
    try {
      this.d.networks.plan({}, { allow: t.allowed_hosts });
    } catch (e) {
      throw badRequest(`allowed_hosts: ${(e as Error).message}`);
    }
    // Their shape and destinations; the secrets they name are looked up by the proxy at each request (one may be added later).
    if (t.egress_rules) {
      if (!t.allowed_hosts?.length) throw badRequest("egress_rules need allowed_hosts: only the egress proxy of an allowlisted sandbox can add headers");
      this.d.networks.plan({ mode: "allowlist", allow: t.allowed_hosts, rules: t.egress_rules });
    }
  }
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

/** A template's idle policy, checked (a 400 naming `idle`) and kept as written. */
function checkedIdle(idle: { after: string; action?: "pause" | "stop" | "none" }): { after: string; action: "pause" | "stop" | "none" } {
  return { after: idle.after, action: parseIdle(idle, "idle").action };
}
