// Secrets kept on the host for the egress proxy to add to a sandbox's requests (net/egress-rules.ts):
// sealed at rest under the server's key, opened only to be written into a request bound for a
// destination a rule names. No view, event or log carries a value. The operator may also give
// a secret in the server's environment (FORGEVM_SECRET_<NAME>); a stored one of the same name wins.
import { randomBytes } from "node:crypto";
import { badRequest, conflict, notFound } from "../../http/errors.js";
import { type SecretInfo, type SecretStore, secretInfo } from "../../store/secrets.js";
import type { SecretBox } from "../environments/secret-box.js";

/** Limits, as E2B's server has them. */
export const SECRET_LIMITS = { name: 128, value: 64 * 1024, metaEntries: 32, metaKey: 128, metaValue: 1024, metaTotal: 8 * 1024, description: 1024 };
const NAME = /^[A-Za-z0-9_-]{1,128}$/;

export interface SecretInput {
  name: string;
  value: string;
  description?: string | null;
  metadata?: Record<string, string>;
}

export interface SecretChange {
  value: string;
  description?: string | null;
  metadata?: Record<string, string>;
}

/** A secret's name as stored and matched: trimmed and lower-cased; a 400 naming `field` when invalid. */
export function secretName(raw: unknown, field = "name"): string {
  if (typeof raw !== "string") throw badRequest(`${field} must be a string`);
  const n = raw.trim();
  if (!NAME.test(n)) throw badRequest(`${field}: a secret's name is 1 to 128 letters, digits, "_" or "-"`);
  if (n.toLowerCase().startsWith("sec_")) throw badRequest(`${field}: a secret's name may not start with "sec_" (ids do)`);
  return n.toLowerCase();
}

function checkValue(v: unknown, field = "value"): string {
  if (typeof v !== "string" || v.length === 0) throw badRequest(`${field} must be a non-empty string`);
  if (Buffer.byteLength(v) > SECRET_LIMITS.value) throw badRequest(`${field} is over ${SECRET_LIMITS.value} bytes`);
  return v;
}

function checkMetadata(m: unknown): Record<string, string> {
  if (m === null || typeof m !== "object" || Array.isArray(m)) throw badRequest("metadata must be an object of strings");
  const entries = Object.entries(m as Record<string, unknown>);
  if (entries.length > SECRET_LIMITS.metaEntries) throw badRequest(`metadata: at most ${SECRET_LIMITS.metaEntries} entries`);
  let total = 0;
  for (const [k, v] of entries) {
    if (typeof v !== "string") throw badRequest(`metadata.${k.slice(0, 64)} must be a string`);
    if (!k || Buffer.byteLength(k) > SECRET_LIMITS.metaKey) throw badRequest(`metadata: a key is 1 to ${SECRET_LIMITS.metaKey} bytes`);
    if (Buffer.byteLength(v) > SECRET_LIMITS.metaValue) throw badRequest(`metadata.${k}: at most ${SECRET_LIMITS.metaValue} bytes`);
    total += Buffer.byteLength(k) + Buffer.byteLength(v);
  }
  if (total > SECRET_LIMITS.metaTotal) throw badRequest(`metadata: at most ${SECRET_LIMITS.metaTotal} bytes in all`);
  return m as Record<string, string>;
}

function checkDescription(d: unknown): string | null {
  if (d === null || d === undefined) return null;
  if (typeof d !== "string" || Buffer.byteLength(d) > SECRET_LIMITS.description) throw badRequest(`description must be a string of at most ${SECRET_LIMITS.description} bytes`);
  return d;
}

/** `sec_` and 26 lower-case base-32 characters, as E2B's ids look. */
function newId(): string {
  const abc = "0123456789abcdefghjkmnpqrstvwxyz";
  return `sec_${[...randomBytes(26)].map((b) => abc[b & 31]).join("")}`;
}

export class Secrets {
  constructor(
    private readonly store: SecretStore,
    private readonly box: SecretBox,
    /** The server's own (FORGEVM_SECRET_<NAME>), by name as given. */
    private readonly host: Record<string, string> = {},
  ) {}

  /** Stores a new secret; 409 when the name is taken. */
  async create(input: SecretInput): Promise<SecretInfo> {
    const name = secretName(input.name);
    const value = checkValue(input.value);
    const metadata = input.metadata === undefined ? {} : checkMetadata(input.metadata);
    const description = checkDescription(input.description);
    if (this.store.get(name)) throw conflict(`a secret named "${name}" exists; update it, or delete it first`);
    const id = newId();
    const now = new Date().toISOString();
    if (!this.store.insert({ id, name, description, metadata, version: 1, sealed: await this.box.seal(id, value), created_at: now, updated_at: now })) {
      throw conflict(`a secret named "${name}" exists; update it, or delete it first`);
    }
    return this.get(id);
  }

  /** Stored secrets, oldest first; `after` (an id) pages on. */
  list(limit?: number, after?: string): SecretInfo[] {
    return this.store.list(limit, after).map(secretInfo);
  }

  /** One stored secret by id or name; 404 when there is none. */
  get(idOrName: string): SecretInfo {
    return secretInfo(this.row(idOrName));
  }

  /** Whether a stored or server-given secret of this name exists (the name as a rule writes it). */
  has(name: string): boolean {
    return !!this.store.get(name.toLowerCase()) || this.hostValue(name) !== undefined;
  }

  /** Replaces the value (the version goes up) and, when given, the description and metadata. */
  async update(idOrName: string, change: SecretChange): Promise<SecretInfo> {
    const row = this.row(idOrName);
    const value = checkValue(change.value);
    const metadata = change.metadata === undefined ? undefined : checkMetadata(change.metadata);
    const description = change.description === undefined ? undefined : checkDescription(change.description);
    this.store.update(row.id, { sealed: await this.box.seal(row.id, value), metadata, description, updated_at: new Date().toISOString() });
    return this.get(row.id);
  }

  /** Deletes a secret; rules that name it then fail their requests with a 502 saying so. */
  remove(idOrName: string): void {
    this.store.delete(this.row(idOrName).id);
  }

  /** The value of a secret a rule names, or undefined: for the egress proxy only. */
  async resolve(name: string): Promise<string | undefined> {
    const row = this.store.get(name.toLowerCase());
    if (row) return this.box.open(row.id, row.sealed);
    return this.hostValue(name);
  }

  private hostValue(name: string): string | undefined {
    const lower = name.toLowerCase();
    for (const [k, v] of Object.entries(this.host)) if (k.toLowerCase() === lower) return v;
    return undefined;
  }

  private row(idOrName: string) {
    const key = idOrName.startsWith("sec_") ? idOrName : idOrName.trim().toLowerCase();
    const row = this.store.get(key);
    if (!row || (key.startsWith("sec_") && row.id !== key)) throw notFound(`no secret "${idOrName.slice(0, 200)}"`);
    return row;
  }
}
