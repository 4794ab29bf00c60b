// The sandbox operations of one core, each given at construction the services and the other
// operations it uses (the lower ones first: plans and admission, then pauses, then what builds
// on them). With open.ts this is the composition root: the only files that see the whole context.
import type { Core } from "./core.js";
import { Copies } from "./sandboxes/copies.js";
import { Creates } from "./sandboxes/create.js";
import { Lifecycle } from "./sandboxes/lifecycle.js";
import { Pauses } from "./sandboxes/pause.js";
import { TenantSpawner } from "./sandboxes/pool-mode.js";
import { Reaper } from "./sandboxes/reaper.js";
import { Recovery } from "./sandboxes/recovery.js";
import { ServerStop } from "./sandboxes/server-stop.js";
import { Spawner } from "./sandboxes/spawn.js";
import { StopStart } from "./sandboxes/stop-start.js";
import { TemplateOps } from "./sandboxes/template-ops.js";

/** The operations on sandboxes and templates that the facades hand calls to. */
export interface Operations {
  readonly lifecycle: Lifecycle;
  readonly pauses: Pauses;
  readonly stopStart: StopStart;
  readonly spawner: Spawner;
  readonly creates: Creates;
  readonly copies: Copies;
  readonly templateOps: TemplateOps;
  readonly reaper: Reaper;
  readonly recovery: Recovery;
  readonly serverStop: ServerStop;
}

export function makeOperations(core: Core): Operations {
  const lifecycle = new Lifecycle(core);
  const pauses = new Pauses({ ...core, lifecycle });
  const stopStart = new StopStart({ ...core, pauses });
  const tenantSpawner = core.tenants ? new TenantSpawner({ ...core, tenants: core.tenants, lifecycle }) : null;
  const spawner = new Spawner({ ...core, lifecycle, tenantSpawner });
  return {
    lifecycle,
    pauses,
    stopStart,
    spawner,
    creates: new Creates({ ...core, poolMode: !!core.tenants, spawner, lifecycle }),
    copies: new Copies({ ...core, lifecycle }),
    templateOps: new TemplateOps({ ...core, spawner }),
    reaper: new Reaper({ ...core, lifecycle, pauses, stopStart }),
    recovery: new Recovery({ ...core, lifecycle, pauses }),
    serverStop: new ServerStop({ ...core, pauses, stopStart }),
  };
}
