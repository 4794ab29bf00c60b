// The host at a glance: CPU, memory and disk now and over the last minutes, sandboxes by state,
// warm pools, and the server's events as they happen.
import { useEffect, useState } from "react";
import { api, bytes, followEvents, type ServerEvent } from "../api";
import { Chart } from "../components/Chart";
import { Card, ErrorBox, go, useData } from "../ui";

const pct = (v: number) => `${v.toFixed(1)}%`;

export function Dashboard() {
  const stats = useData<any>(() => api("GET", "/stats"), [], 5000);
  const history = useData<any>(() => api("GET", "/host/metrics?since=30m"), [], 10_000);
  const sandboxes = useData<any[]>(() => api("GET", "/sandboxes?all=true"), [], 5000);
  const [events, setEvents] = useState<ServerEvent[]>([]);
  useEffect(() => {
    const stop = new AbortController();
    // Each layer's progress of a pull is an event of its own: the dashboard shows the pull, not those.
    void followEvents((e) => e.type !== "image.progress" && setEvents((l) => [e, ...l].slice(0, 30)), stop.signal);
    return () => stop.abort();
  }, []);
  const host = stats.data?.host ?? {};
  const byState: Record<string, number> = {};
  for (const s of sandboxes.data ?? []) byState[s.state] = (byState[s.state] ?? 0) + 1;
  const samples: any[] = history.data?.samples ?? [];
  const ts = samples.map((s) => s.ts);
  return (
    <div className="page">
      <h2>Dashboard</h2>
      <ErrorBox error={stats.error ?? sandboxes.error} />
      <div className="tiles">
        <Tile label="Host CPU" value={host.guest_cpu_pct !== undefined ? pct(host.guest_cpu_pct) : "–"} sub={`load ${host.load1 ?? "–"}`} />
        <Tile label="Memory" value={bytes(host.mem_used_bytes)} sub={`of ${bytes(host.mem_total_bytes)}`} />
        <Tile label="Disk (data directory)" value={bytes(host.disk_used_bytes)} sub={`of ${bytes(host.disk_total_bytes)}`} />
        <Tile
          label="Running sandboxes"
          value={String(byState.running ?? 0)}
          sub={
            Object.entries(byState)
              .filter(([s]) => s !== "running")
              .map(([s, n]) => `${n} ${s}`)
              .join(", ") || "none other"
          }
        />
      </div>
      <div className="grid2">
        <Card title="Host CPU">
          <Chart title="CPU" ts={ts} max={100} format={pct} series={[{ label: "used", color: "var(--c1)", values: samples.map((s) => s.guest_cpu_pct) }]} />
        </Card>
        <Card title="Host memory">
          <Chart title="Memory" ts={ts} format={bytes} max={host.mem_total_bytes} series={[{ label: "used", color: "var(--c2)", values: samples.map((s) => s.mem_used_bytes) }]} />
        </Card>
      </div>
      <div className="grid2">
        <Card
          title="Running sandboxes"
          actions={
            <button type="button" onClick={() => go("sandboxes/new")}>
              Launch
            </button>
          }
        >
          <table className="list">
            <thead>
              <tr>
                <th>Sandbox</th>
                <th>Image</th>
                <th className="num">CPU</th>
                <th className="num">Memory</th>
              </tr>
            </thead>
            <tbody>
              {(stats.data?.sandboxes ?? []).map((s: any) => (
                <tr key={s.id}>
                  <td>
                    <a href={`#/sandboxes/${s.id}`}>{s.name ?? s.id}</a>
                  </td>
                  <td>{s.image}</td>
                  <td className="num">{s.sample.cpu_pct !== undefined ? pct(s.sample.cpu_pct) : "–"}</td>
                  <td className="num">{bytes(s.sample.mem_used_bytes)}</td>
                </tr>
              ))}
              {!stats.data?.sandboxes?.length && (
                <tr>
                  <td colSpan={4} className="muted">
                    nothing running
                  </td>
                </tr>
              )}
            </tbody>
          </table>
        </Card>
        <Card title="Recent events">
          <ul className="events" data-testid="events">
            {events.map((e) => (
              <li key={e.id}>
                <span className="muted">{new Date(e.timestamp).toLocaleTimeString()}</span> <code>{e.type}</code>{" "}
                {e.sandbox_id && <a href={`#/sandboxes/${e.sandbox_id}`}>{e.sandbox_id}</a>}
              </li>
            ))}
            {!events.length && <li className="muted">events appear here as they happen</li>}
          </ul>
        </Card>
      </div>
      <PoolsCard />
    </div>
  );
}

/** Warm pools (kept restored and ready) and pool mode's shared VMs. */
export function PoolsCard() {
  const pools = useData<any>(() => api("GET", "/pool/status"), [], 5000);
  const p = pools.data;
  return (
    <Card title="Warm pools">
      <ErrorBox error={pools.error} />
      <table className="list">
        <thead>
          <tr>
            <th>Pool</th>
            <th className="num">Ready</th>
            <th className="num">Size</th>
            <th className="num">Memory</th>
          </tr>
        </thead>
        <tbody>
          {(p?.warm ?? []).map((w: any) => (
            <tr key={w.pool}>
              <td>{w.pool}</td>
              <td className="num">{w.ready}</td>
              <td className="num">{w.size}</td>
              <td className="num">{w.memory_mb} MiB</td>
            </tr>
          ))}
          {!p?.warm?.length && (
            <tr>
              <td colSpan={4} className="muted">
                no warm pools (set warm_pool.size or a template's pool_size)
              </td>
            </tr>
          )}
        </tbody>
      </table>
      {p?.enabled && (
        <>
          <h3>Pool mode: sandboxes as users of shared VMs</h3>
          <p className="muted">
            {p.vms} of {p.max_vms} VMs, {p.active_users} users, {p.available_slots} seats free ({p.max_users_per_vm} per VM)
          </p>
          <table className="list">
            <tbody>
              {(p.pool_vms ?? []).map((v: any) => (
                <tr key={v.id}>
                  <td className="mono">{v.id}</td>
                  <td className="num">
                    {v.users} / {v.max_users} users
                  </td>
                  <td className="num">{v.memory_mb} MiB</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </Card>
  );
}

function Tile({ label, value, sub }: { label: string; value: string; sub: string }) {
  return (
    <div className="tile">
      <div className="muted">{label}</div>
      <div className="value">{value}</div>
      <div className="muted small">{sub}</div>
    </div>
  );
}
