// Pool mode: logical sandboxes share pre-warmed VMs. Each sandbox is its own Linux user in a
// host VM, with a private workspace (mode 0700) and a private umask; /proc hides other users'
// processes, and the kernel refuses signals across users. At most `maxUsersPerVm` tenants per
// host VM and `maxVms` host VMs; beyond that a spawn is refused (503) or waits for a seat.
import type { Vm } from "../../providers/provider.js";
import { ForgevmError } from "../../http/errors.js";
import type { Emit } from "../events.js";
import type { Tenant } from "../guest/sandbox.js";
import { ignore } from "../../util/ignore.js";

export interface TenantPoolOptions {
  maxVms: number;
  maxUsersPerVm: number;
  overflow: "reject" | "queue";
  /** How long a spawn waits for a seat with overflow "queue". */
  queueTimeoutMs: number;
  memoryMb: number;
}

export interface Host {
  id: string;
  vm: Vm | null;
  snapshotId: string | null;
  /** Sandbox ids seated here (seats are taken before the VM is even up). */
  tenants: Map<string, Tenant | null>;
  ready: Promise<void>;
  nextUid: number;
  /** Tenant set-up and tear-down in one host run one at a time (they edit /etc/passwd). */
  lock: Promise<unknown>;
}

/** First uid given to a tenant; every tenant gets a fresh one, never reused within a host. */
const FIRST_UID = 10000;

export class TenantPool {
  private readonly hosts = new Map<string, Host>();
  private readonly waiters = new Set<() => void>();
  private closed = false;

  constructor(
    private readonly opts: TenantPoolOptions,
    private readonly makeHost: () => Promise<{ vm: Vm; snapshotId: string }>,
    private readonly emit: Emit,
  ) {}

  /** Seats a new sandbox in a host VM (starting one if allowed) and creates its user. */
  async join(sandboxId: string): Promise<{ host: Host; tenant: Tenant }> {
    const deadline = Date.now() + (this.opts.overflow === "queue" ? this.opts.queueTimeoutMs : 0);
    for (;;) {
      if (this.closed) throw new ForgevmError("UNAVAILABLE", "the server is shutting down");
      const host = this.seat(sandboxId);
      if (host) {
        try {
          await host.ready;
          const tenant = await this.locked(host, () => addTenant(host, sandboxId));
          host.tenants.set(sandboxId, tenant);
          return { host, tenant };
        } catch (e) {
          host.tenants.delete(sandboxId);
          this.wake();
          throw e;
        }
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new ForgevmError(
          "UNAVAILABLE",
          `the pool is full: ${this.opts.maxVms} VMs × ${this.opts.maxUsersPerVm} users are in use${this.opts.overflow === "queue" ? ` (waited ${this.opts.queueTimeoutMs} ms)` : ""}`,
        );
      }
      await this.waitForSeat(left);
    }
  }

  /** Removes a tenant: kills its processes, deletes its files and user; an empty spare host VM stops. */
  async leave(sandboxId: string): Promise<void> {
    const host = [...this.hosts.values()].find((h) => h.tenants.has(sandboxId));
    if (!host) return;
    const tenant = host.tenants.get(sandboxId);
    if (tenant && host.vm?.guest.isOpen) await this.locked(host, () => removeTenant(host.vm!, tenant)).catch(ignore("the host may be gone; its tenants go with it"));
    host.tenants.delete(sandboxId);
    // One empty host stays warm for the next tenant; more than one empty host is waste.
    const empty = [...this.hosts.values()].filter((h) => h.tenants.size === 0 && h.vm);
    if (host.tenants.size === 0 && (empty.length > 1 || !host.vm?.guest.isOpen)) {
      this.hosts.delete(host.id);
      await host.vm?.destroy();
    }
    this.wake();
  }

  /** Starts the first host VM ahead of demand. */
  prewarm(): void {
    if (this.hosts.size === 0) this.startHost().ready.catch(ignore("a host's failure to start is reported to the spawn waiting on it"));
  }

  status(): Record<string, unknown> {
    const hosts = [...this.hosts.values()].filter((h) => h.vm);
    const users = hosts.reduce((n, h) => n + h.tenants.size, 0);
    return {
      enabled: true,
      vms: hosts.length,
      max_vms: this.opts.maxVms,
      total_users: users,
      max_users_per_vm: this.opts.maxUsersPerVm,
      total_vms: hosts.length,
      active_users: users,
      available_slots: this.opts.maxVms * this.opts.maxUsersPerVm - users,
      pool_vms: hosts.map((h) => ({ id: h.id, users: h.tenants.size, max_users: this.opts.maxUsersPerVm, memory_mb: this.opts.memoryMb })),
    };
  }

  snapshotIds(): Set<string> {
    return new Set([...this.hosts.values()].flatMap((h) => (h.snapshotId ? [h.snapshotId] : [])));
  }

  async close(): Promise<void> {
    this.closed = true;
    this.wake();
    const hosts = [...this.hosts.values()];
    this.hosts.clear();
    await Promise.all(
      hosts.map(async (h) => {
        await h.ready.catch(ignore("a host's failure to start is reported to the spawn waiting on it"));
        await h.vm?.destroy();
      }),
    );
  }

  // Takes a free seat, filling the fullest host first (fewer VMs), else starts a host if allowed.
  private seat(sandboxId: string): Host | null {
    const open = [...this.hosts.values()].filter((h) => h.tenants.size < this.opts.maxUsersPerVm).sort((a, b) => b.tenants.size - a.tenants.size)[0];
    const host = open ?? (this.hosts.size < this.opts.maxVms ? this.startHost() : null);
    host?.tenants.set(sandboxId, null);
    return host;
  }

  private startHost(): Host {
    const host: Host = { id: "", vm: null, snapshotId: null, tenants: new Map(), ready: Promise.resolve(), nextUid: FIRST_UID, lock: Promise.resolve() };
    const key = `starting-${Math.random().toString(36).slice(2)}`;
    host.id = key;
    host.ready = (async () => {
      try {
        const { vm, snapshotId } = await this.makeHost();
        await prepareHost(vm);
        host.vm = vm;
        host.snapshotId = snapshotId;
        this.hosts.delete(key);
        host.id = vm.info.id;
        this.hosts.set(host.id, host);
        if (this.closed) await vm.destroy();
      } catch (e) {
        this.hosts.delete(key);
        this.emit("pool.error", null, { pool: "tenants", error: (e as Error).message.split("\n")[0] });
        this.wake();
        throw new ForgevmError("UNAVAILABLE", `cannot start a pool VM: ${(e as Error).message.split("\n")[0]}`);
      }
    })();
    host.ready.catch(ignore("a host's failure to start is reported to the spawn waiting on it"));
    this.hosts.set(key, host);
    return host;
  }

  private locked<T>(host: Host, fn: () => Promise<T>): Promise<T> {
    const p = host.lock.then(fn, fn);
    host.lock = p.catch(ignore("the failure is the call's own; the lock goes on"));
    return p;
  }

  private waitForSeat(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.waiters.delete(done);
        resolve();
      };
      const t = setTimeout(done, ms);
      this.waiters.add(done);
    });
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }
}

async function rootSh(vm: Vm, script: string): Promise<void> {
  const r = await vm.guest.execBuffered({ argv: ["/bin/sh", "-ec", script], timeout_ms: 30_000 });
  if (r.exit_code !== 0) throw new Error(`pool VM set-up failed (${r.exit_code}): ${r.stderr.toString().trim().slice(-300)}`);
}

/** Once per host VM: other users' processes are hidden from /proc. */
async function prepareHost(vm: Vm): Promise<void> {
  await rootSh(vm, "mount -o remount,hidepid=2 /proc; mkdir -p /workspace; chmod 755 /workspace");
}

// A fresh uid per tenant, so files a previous tenant left in a shared directory are never its.
async function addTenant(host: Host, sandboxId: string): Promise<Tenant> {
  const uid = host.nextUid++;
  const user = `u${uid}`;
  const home = `/workspace/${sandboxId}`;
  await rootSh(
    host.vm!,
    `echo '${user}:x:${uid}:${uid}:${sandboxId}:${home}:/bin/sh' >> /etc/passwd
     echo '${user}:x:${uid}:' >> /etc/group
     mkdir -p '${home}' && chown ${uid}:${uid} '${home}' && chmod 700 '${home}'`,
  );
  return { uid, gid: uid, user, home };
}

/** Kills every process of the tenant's uid, then removes its workspace, its files elsewhere and its user. */
async function removeTenant(vm: Vm, t: Tenant): Promise<void> {
  // kill -1 as that user reaches every process it owns (and nothing else); repeat for forks in flight.
  for (let i = 0; i < 3; i++) await vm.guest.execBuffered({ argv: ["/bin/sh", "-c", "kill -KILL -1"], uid: t.uid, timeout_ms: 10_000 }).catch(ignore("no process left to kill"));
  await rootSh(
    vm,
    `rm -rf '${t.home}'
     for d in /tmp /var/tmp /dev/shm; do [ -d $d ] && find $d -xdev -uid ${t.uid} -delete 2>/dev/null || true; done
     sed -i '/^${t.user}:/d' /etc/passwd /etc/group`,
  );
}
