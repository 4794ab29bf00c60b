// The Environments API as core operations: specs (create, list, get, suggestions), builds
// (builds.ts), what to spawn from a build, and registry connections (connections.ts). Every
// interface (REST, CLI through REST, SDKs) goes through this one class.
import { randomUUID } from "node:crypto";
import type { EnvBuildStatus, EnvironmentStore, EnvSpecRow } from "../../store/environments.js";
import { badRequest, conflict, notFound } from "../../http/errors.js";
import type { EnvironmentBuilds, EnvBuildView } from "./builds.js";
import type { RegistryConnections } from "./connections.js";
import { cleanSpec, type SpecInput } from "./spec.js";

export interface SpawnConfig {
  build_id: string;
  build_status: EnvBuildStatus;
  ready: boolean;
  provider: string;
  image: string;
  target: string;
  digest: string | null;
  note: string;
}

/** Files whose absence from a base image suggests a package, and when to suggest it. */
const LACKS: { paths: string[]; pkg: string; when: (s: EnvSpecRow) => boolean }[] = [
  { paths: ["/usr/bin/python3", "/usr/local/bin/python3"], pkg: "python3", when: (s) => s.python_packages.length > 0 },
  {
    paths: ["/usr/bin/pip3", "/usr/local/bin/pip3", "/usr/local/bin/pip", "/usr/lib/python3/dist-packages/pip"],
    pkg: "python3-pip",
    when: () => true,
  },
  { paths: ["/usr/bin/gcc", "/usr/local/bin/gcc"], pkg: "build-essential", when: (s) => s.python_packages.length > 0 },
  { paths: ["/etc/ssl/certs/ca-certificates.crt"], pkg: "ca-certificates", when: () => true },
  { paths: ["/usr/bin/curl"], pkg: "curl", when: () => true },
  { paths: ["/usr/bin/git"], pkg: "git", when: () => true },
];

/** The order spawn-config prefers artifacts in. */
const PREFERENCE = ["local", "ghcr", "dockerhub"];

export class Environments {
  constructor(
    private readonly store: EnvironmentStore,
    readonly builds: EnvironmentBuilds,
    readonly connections: RegistryConnections,
    private readonly imageHas: (image: string, paths: string[]) => Promise<Set<string> | null>,
    private readonly provider: () => string,
  ) {}

  /** Cancels the builds and waits for the running ones to stop (server shutdown). */
  close(): Promise<void> {
    return this.builds.close();
  }

  /** Stores a new spec; 409 when the owner has one of that name. */
  createSpec(input: SpecInput): EnvSpecRow {
    const clean = cleanSpec(input);
    const now = new Date().toISOString();
    const row: EnvSpecRow = { id: randomUUID(), ...clean, created_at: now, updated_at: now };
    if (!this.store.insertSpec(row)) throw conflict(`owner ${clean.owner_id} has an environment named ${clean.name} already`);
    return row;
  }

  /** An owner's specs, newest first. */
  listSpecs(ownerId: string | undefined): EnvSpecRow[] {
    if (!ownerId?.trim()) throw badRequest("owner_id: required (whose environments to list)");
    return this.store.specs(ownerId.trim());
  }

  spec(id: string): EnvSpecRow {
    const s = this.store.spec(id);
    if (!s) throw notFound(`environment spec ${id} not found`);
    return s;
  }

  /** Packages the spec's base image lacks that it likely wants (none asked for already). */
  async suggestions(id: string): Promise<{ spec_id: string; suggestions: string[]; note?: string }> {
    const s = this.spec(id);
    const wanted = LACKS.filter((l) => l.when(s) && !s.apt_packages.some((p) => p.split(/[=:]/)[0] === l.pkg));
    const has = await this.imageHas(
      s.base_image,
      wanted.flatMap((l) => l.paths),
    );
    if (!has) return { spec_id: s.id, suggestions: [], note: `${s.base_image} is not on this server yet: pull it (or build once) for suggestions` };
    return { spec_id: s.id, suggestions: wanted.filter((l) => !l.paths.some((p) => has.has(p))).map((l) => l.pkg) };
  }

  /** What to spawn from a build: its first ready artifact (local, then ghcr, then dockerhub, then others). */
  spawnConfig(buildId: string): SpawnConfig {
    const b: EnvBuildView = this.builds.view(buildId);
    if (!b.artifacts.length) throw notFound(`environment build ${buildId} has no artifacts`);
    const rank = (t: string) => (PREFERENCE.includes(t) ? PREFERENCE.indexOf(t) : PREFERENCE.length);
    const sorted = [...b.artifacts].sort((x, y) => rank(x.target) - rank(y.target));
    const pick = sorted.find((a) => a.status === "ready") ?? sorted[0];
    const ready = pick.status === "ready";
    return {
      build_id: b.id,
      build_status: b.status,
      ready,
      provider: this.provider(),
      image: pick.image_ref,
      target: pick.target,
      digest: pick.digest ?? null,
      note: ready
        ? `POST /api/v1/sandboxes with {"image": "${pick.image_ref}"}`
        : `the ${pick.target} artifact is ${pick.status}${pick.error ? `: ${pick.error}` : ""}; spawn once the build is ready`,
    };
  }
}
