// Template rows: the template body as JSON, keyed by name.
import type { Db } from "./db.js";

export interface TemplateBody {
  name: string;
  version?: string;
  image?: string;
  description?: string;
  setup?: string[];
  memory_mb?: number;
  cpu_cores?: number;
  ttl_seconds?: number;
  env?: Record<string, string>;
  /** Egress allowlist of its sandboxes (and of its setup commands): network "allowlist". */
  allowed_hosts?: string[];
  /** Headers the egress proxy adds to its sandboxes' requests per destination, secrets by placeholder (net/egress-rules.ts). */
  egress_rules?: Record<string, { headers: Record<string, string> }>;
  /** Secrets its sandboxes need: names only; values come with each spawn (or the server's env). */
  secrets?: { name: string; inject_at?: "env" | "file" | "both" }[];
  /** Warm sandboxes kept restored and ready for spawns of this template. */
  pool_size?: number;
  /** What its sandboxes do once idle (`after` a duration). */
  idle?: { after: string; action: "pause" | "stop" | "none" };
  /** Its sandboxes keep their RAM in a file of their own (fast forks and pauses; see SpawnOptions.forkable). */
  forkable?: boolean;
  /** What its sandboxes have forwarded from the host (guest/forwards.ts). */
  forward?: string[];
  /** Its sandboxes boot their image's systemd (SpawnOptions.system); absent: what the image says. */
  system?: boolean;
  /** The provider its sandboxes run on (absent: the server's default). */
  provider?: string;
  /** Copied into the metadata of every sandbox spawned from it. */
  metadata?: Record<string, string>;
}

export interface TemplateRow extends TemplateBody {
  created_at: string;
  updated_at: string;
}

export class TemplateStore {
  constructor(private readonly db: Db) {}

  /** Inserts a new template; false when the name is taken. */
  create(t: TemplateBody): boolean {
    const now = new Date().toISOString();
    const r = this.db.prepare("INSERT OR IGNORE INTO templates (name, body, created_at, updated_at) VALUES (?, ?, ?, ?)").run(t.name, JSON.stringify(t), now, now);
    return r.changes === 1;
  }

  /** Replaces a template's body; false when it does not exist. */
  replace(t: TemplateBody): boolean {
    return this.db.prepare("UPDATE templates SET body = ?, updated_at = ? WHERE name = ?").run(JSON.stringify(t), new Date().toISOString(), t.name).changes === 1;
  }

  get(name: string): TemplateRow | undefined {
    const r = this.db.prepare("SELECT * FROM templates WHERE name = ?").get(name) as { body: string; created_at: string; updated_at: string } | undefined;
    return r && { ...(JSON.parse(r.body) as TemplateBody), created_at: r.created_at, updated_at: r.updated_at };
  }

  list(): TemplateRow[] {
    return (this.db.prepare("SELECT * FROM templates ORDER BY name").all() as { body: string; created_at: string; updated_at: string }[]).map((r) => ({
      ...(JSON.parse(r.body) as TemplateBody),
      created_at: r.created_at,
      updated_at: r.updated_at,
    }));
  }

  delete(name: string): boolean {
    return this.db.prepare("DELETE FROM templates WHERE name = ?").run(name).changes === 1;
  }
}
