// Registry connections: an owner's login to GitHub's or Docker Hub's registry (or any other, by
// host), which environment builds push to. The secret is sealed before it reaches the store, or
// is a reference ("secret:NAME") to a secret the operator gave the server (FORGEVM_SECRET_NAME);
// no view, log or error ever holds it.
import { randomUUID } from "node:crypto";
import type { Credentials } from "../../images/registry.js";
import { DOCKER_HUB } from "../../images/reference.js";
import type { EnvironmentStore, RegistryConnectionRow } from "../../store/environments.js";
import { badRequest, conflict, notFound } from "../../http/errors.js";
import type { SecretBox } from "./secret-box.js";

export interface ConnectionInput {
  id?: string;
  owner_id: string;
  provider: string;
  username: string;
  secret_ref: string;
  is_default?: boolean;
  /** host[:port] of the registry; required for provider "registry". */
  registry?: string;
}

/** A connection as every interface shows it: never the secret. */
export interface ConnectionView {
  id: string;
  owner_id: string;
  provider: string;
  registry: string;
  username: string;
  is_default: boolean;
  /** "encrypted" (sealed in the store) or "operator" (a reference to the operator's secret). */
  secret_storage: "encrypted" | "operator";
  /** The operator secret's reference ("secret:NAME"); absent for an encrypted secret. */
  secret_ref?: string;
  created_at: string;
  updated_at: string;
}

/** The registry host of each provider; "registry" takes the caller's. */
export const PROVIDER_REGISTRY: Record<string, string | null> = { ghcr: "ghcr.io", dockerhub: DOCKER_HUB, registry: null };
const REF = /^secret:([A-Za-z_][A-Za-z0-9_]{0,127})$/;
const HOST = /^[a-z0-9]([a-z0-9.-]{0,252})(:\d{1,5})?$/;
const USER = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

export function connectionView(r: RegistryConnectionRow): ConnectionView {
  const ref = REF.test(r.secret) ? r.secret : undefined;
  return {
    id: r.id,
    owner_id: r.owner_id,
    provider: r.provider,
    registry: r.registry,
    username: r.username,
    is_default: r.is_default,
    secret_storage: ref ? "operator" : "encrypted",
    ...(ref ? { secret_ref: ref } : {}),
    created_at: r.created_at,
    updated_at: r.updated_at,
  };
}

export class RegistryConnections {
  constructor(
    private readonly store: EnvironmentStore,
    private readonly box: SecretBox,
    /** The operator's secrets, by name. */
    private readonly operatorSecrets: Record<string, string>,
  ) {}

  /** Creates or (by id) replaces a connection; 409 when the owner has one for that login already. */
  async put(input: ConnectionInput): Promise<{ view: ConnectionView; created: boolean }> {
    const owner = typeof input.owner_id === "string" ? input.owner_id.trim() : "";
    if (!owner) throw badRequest("owner_id: required");
    if (!(input.provider in PROVIDER_REGISTRY)) throw badRequest(`provider: must be ghcr, dockerhub or registry, got "${input.provider}"`);
    const fixed = PROVIDER_REGISTRY[input.provider];
    const registry = (input.registry ?? "").trim().toLowerCase() || fixed || "";
    if (!registry) throw badRequest('registry: required with provider "registry" (host[:port], such as registry.example.com)');
    if (fixed && registry !== fixed) throw badRequest(`registry: provider ${input.provider} pushes to ${fixed}; use provider "registry" for ${registry}`);
    if (!HOST.test(registry)) throw badRequest(`registry: "${registry}" is not host[:port]`);
    const username = typeof input.username === "string" ? input.username.trim() : "";
    if (!USER.test(username)) throw badRequest("username: required (letters, digits, '.', '_' or '-')");
    const secret = typeof input.secret_ref === "string" ? input.secret_ref : "";
    if (!secret) throw badRequest("secret_ref: required (the registry token or password, or secret:NAME for a secret the operator configured)");
    if (secret.length > 8192) throw badRequest("secret_ref: at most 8192 characters");
    const id = input.id?.trim() || randomUUID();
    if (id.length > 128 || !/^[A-Za-z0-9._-]+$/.test(id)) throw badRequest("id: letters, digits, '.', '_' or '-' (at most 128)");
    const old = this.store.connection(id);
    if (old && old.owner_id !== owner) throw conflict(`registry connection ${id} belongs to another owner`);
    const ref = REF.exec(secret);
    if (ref && !(ref[1] in this.operatorSecrets)) throw badRequest(`secret_ref: the server has no secret ${ref[1]} (the operator sets FORGEVM_SECRET_${ref[1]})`);
    const now = new Date().toISOString();
    const row: RegistryConnectionRow = {
      id,
      owner_id: owner,
      provider: input.provider,
      registry,
      username,
      secret: ref ? secret : await this.box.seal(id, secret),
      is_default: input.is_default ?? false,
      created_at: old?.created_at ?? now,
      updated_at: now,
    };
    if (!this.store.putConnection(row)) throw conflict(`owner ${owner} has a ${input.provider} connection for ${username} at ${registry} already`);
    return { view: connectionView(this.store.connection(id)!), created: !old };
  }

  list(ownerId: string): ConnectionView[] {
    if (!ownerId?.trim()) throw badRequest("owner_id: required");
    return this.store.connections(ownerId.trim()).map(connectionView);
  }

  remove(id: string): void {
    if (!this.store.deleteConnection(id)) throw notFound(`registry connection ${id} not found`);
  }

  /** The connection a build target stands for: an id, or a provider's (default or only) one of the owner. */
  resolve(ownerId: string, target: string): RegistryConnectionRow {
    if (target in PROVIDER_REGISTRY) {
      const mine = this.store.connections(ownerId).filter((c) => c.provider === target);
      if (!mine.length) throw badRequest(`targets: "${target}" needs a ${target} registry connection of owner ${ownerId} (POST /environments/registry-connections)`);
      const pick = mine.find((c) => c.is_default) ?? (mine.length === 1 ? mine[0] : null);
      if (!pick) throw badRequest(`targets: owner ${ownerId} has ${mine.length} ${target} connections and none is the default; name one by id`);
      return pick;
    }
    const c = this.store.connection(target);
    if (!c || c.owner_id !== ownerId) throw badRequest(`targets: "${target}" is not local, ghcr, dockerhub or a registry connection of owner ${ownerId}`);
    return c;
  }

  /** The login of a connection, for one push. */
  async credentials(c: RegistryConnectionRow): Promise<Credentials> {
    const ref = REF.exec(c.secret);
    if (ref) {
      const v = this.operatorSecrets[ref[1]];
      if (v === undefined) throw badRequest(`registry connection ${c.id}: the server no longer has secret ${ref[1]}`);
      return { username: c.username, password: v };
    }
    try {
      return { username: c.username, password: await this.box.open(c.id, c.secret) };
    } catch {
      throw badRequest(`registry connection ${c.id}: its secret cannot be decrypted with this server's key; set it again`);
    }
  }
}
