// The one mapping from a REST spawn body (snake_case, durations as text) to the core's spawn
// options, for every route that spawns from one: POST /sandboxes and POST /templates/{name}/spawn.
import type { Static } from "typebox";
import type { SpawnOptions } from "../../core/options.js";
import { parseDuration, parseIdle, parseTtl } from "../../schemas/durations.js";
import type { SpawnRequest } from "../../schemas/rest.js";

/** The spawn options a REST spawn body asks for, owned by `ownerId` (ownerOf's answer). */
export function spawnOptionsOf(b: Static<typeof SpawnRequest>, ownerId: string | undefined): SpawnOptions {
  return {
    image: b.image,
    provider: b.provider,
    memoryMb: b.memory_mb,
    vcpus: b.vcpus,
    diskMb: b.disk_mb,
    ttlMs: b.ttl !== undefined ? parseTtl(b.ttl, "ttl") : undefined,
    ownerId,
    metadata: b.metadata,
    env: b.env,
    template: b.template,
    user: b.user,
    network: b.network,
    allow: b.allow,
    egressRules: b.egress_rules,
    deny: b.deny,
    ports: b.ports,
    secrets: b.secrets,
    name: b.name,
    main: b.main,
    idleStopMs: b.idle_stop !== undefined ? parseDuration(b.idle_stop, "idle_stop") : undefined,
    idle: b.idle !== undefined ? parseIdle(b.idle, "idle") : undefined,
    volumes: b.volumes,
    cache: b.cache,
    forkable: b.forkable,
    screen: b.screen,
    forward: b.forward,
    system: b.system,
  };
}
