// The Environments service, made from the store and what it needs of the rest of the core.
import { join } from "node:path";
import type { Db } from "../../store/db.js";
import { EnvironmentStore } from "../../store/environments.js";
import type { EnvironmentOptions } from "../options.js";
import { EnvironmentBuilds, type EnvironmentWork } from "./builds.js";
import { RegistryConnections } from "./connections.js";
import { Environments } from "./environments.js";
import { SecretBox } from "./secret-box.js";
import { PYPI_SIMPLE } from "./steps.js";

export { Environments } from "./environments.js";
export type { SpawnConfig } from "./environments.js";
export type { EnvBuildView, ArtifactView } from "./builds.js";
export type { ConnectionView, ConnectionInput } from "./connections.js";
export type { SpecInput } from "./spec.js";
export type { EnvSpecRow as EnvSpec } from "../../store/environments.js";

/** What the service needs from Forge. */
export interface EnvironmentDeps extends Omit<EnvironmentWork, "memoryMb" | "concurrency"> {
  db: Db;
  dataDir: string;
  options: EnvironmentOptions;
  operatorSecrets: Record<string, string>;
  provider: () => string;
}

/** Opens the Environments service; builds a previous server left running are marked failed. */
export function openEnvironments(d: EnvironmentDeps): Environments {
  const store = new EnvironmentStore(d.db);
  const o = d.options;
  const connections = new RegistryConnections(store, new SecretBox(o.secretKeyFile || join(d.dataDir, "keys", "environments.key")), d.operatorSecrets);
  const builds = new EnvironmentBuilds(
    store,
    connections,
    { ...d, memoryMb: o.memoryMb ?? 1024, concurrency: o.concurrency ?? 1 },
    { pythonIndex: o.pythonIndex || PYPI_SIMPLE, aptSources: o.aptSources ?? [], allow: o.allow ?? [] },
  );
  return new Environments(store, builds, connections, d.imageHas, d.provider);
}
