// One sandbox: its details and live charts (host and guest, 10 m / 1 h / 24 h), a terminal,
// files, processes, the console log, network (components/NetworkTab.tsx), the desktop of a
// desktop sandbox (components/DesktopTab.tsx) and the actions:
// snapshot, fork, stop/start, extend, destroy.
import { useRef, useState } from "react";
import { api, bytes, q, relative } from "../api";
import { Chart } from "../components/Chart";
import { DesktopTab } from "../components/DesktopTab";
import { FileBrowser } from "../components/FileBrowser";
import { NetworkTab } from "../components/NetworkTab";
import { Terminal } from "../components/Terminal";
import { Action, Card, ErrorBox, go, StateBadge, Tabs, useData } from "../ui";

const RANGES: Record<string, string> = { "10 m": "10m", "1 h": "1h", "24 h": "24h" };
const pct = (v: number) => `${v.toFixed(1)}%`;
const rate = (v: number) => `${bytes(v)}/s`;

export function SandboxDetail({ id, tab }: { id: string; tab?: string }) {
  const [error, setError] = useState<string | null>(null);
  // Set while it is being destroyed: its page stops asking for it (an answer of 404 would be
  // logged by the browser as an error) and goes to the list once it is gone.
  const destroying = useRef(false);
  // While the page pauses or stops it, what only a running sandbox answers (the balloon) is not asked.
  const [changing, setChanging] = useState(false);
  const change = (fn: () => Promise<unknown>) => async () => {
    setChanging(true);
    try {
      await fn();
    } finally {
      setChanging(false);
    }
  };
  const sb = useData<any>(() => (destroying.current ? new Promise(() => {}) : api("GET", `/sandboxes/${q(id)}`)), [id], 3000);
  const s = sb.data;
  const running = s?.state === "running";
  const usable = running || s?.state === "paused";
  const active = tab ?? "Overview";
  const tabs = ["Overview", "Terminal", "Files", "Processes", "Logs", "Network", "Desktop"];
  return (
    <div className="page">
      <div className="page-head">
        <h2>
          <a href="#/sandboxes">Sandboxes</a> / <span data-testid="sandbox-id">{id}</span> {s && <StateBadge state={s.state} />}
        </h2>
        <div className="actions">
          {running && (
            <>
              {/* A snapshot and a fork stop the VM for a moment: the balloon is not asked meanwhile. */}
              <Action
                label="Snapshot"
                onError={setError}
                run={change(async () => {
                  const name = window.prompt("Snapshot name (empty for none)") ?? undefined;
                  await api("POST", `/sandboxes/${q(id)}/snapshot`, name ? { name } : {});
                  go("snapshots");
                })}
              />
              <Action
                label="Fork"
                onError={setError}
                run={change(async () => {
                  const r = await api("POST", `/sandboxes/${q(id)}/fork`, { count: 1 });
                  go(`sandboxes/${r.sandboxes[0].id}`);
                })}
              />
              {s?.expires_at && (
                <Action
                  label="Extend 30m"
                  onError={setError}
                  title="30 minutes more than it has left"
                  run={() => {
                    // The API sets the expiry from now: what is left goes in too, so this only ever lengthens.
                    const left = Math.max(0, Math.round((Date.parse(s.expires_at) - Date.now()) / 1000));
                    return api("POST", `/sandboxes/${q(id)}/extend`, { ttl: `${left + 1800}s` }).then(sb.reload);
                  }}
                />
              )}
              <Action
                label="Pause"
                onError={setError}
                run={change(() => api("POST", `/sandboxes/${q(id)}/pause`).then(sb.reload))}
                title="keep memory and processes on disk and free the VM; any use resumes it"
              />
              <Action label="Stop" onError={setError} run={change(() => api("POST", `/sandboxes/${q(id)}/stop`, {}).then(sb.reload))} title="stop the VM and keep its disk" />
            </>
          )}
          {s?.state === "paused" && <Action label="Resume" kind="primary" onError={setError} run={() => api("POST", `/sandboxes/${q(id)}/resume`, {}).then(sb.reload)} />}
          {s?.state === "stopped" && <Action label="Start" kind="primary" onError={setError} run={() => api("POST", `/sandboxes/${q(id)}/start`, {}).then(sb.reload)} />}
          {s && s.state !== "destroyed" && s.state !== "error" && (
            <Action
              label="Destroy"
              kind="danger"
              confirm={`Destroy ${id}? Its files are gone for good.`}
              onError={setError}
              run={async () => {
                destroying.current = true;
                setChanging(true);
                try {
                  await api("DELETE", `/sandboxes/${q(id)}`);
                } catch (e) {
                  destroying.current = false;
                  setChanging(false);
                  throw e;
                }
                go("sandboxes");
              }}
            />
          )}
        </div>
      </div>
      <ErrorBox error={error ?? sb.error} onClose={() => setError(null)} />
      <Tabs tabs={tabs} active={active} onChange={(t) => go(`sandboxes/${id}/${t}`)} />
      {s && active === "Overview" && <Overview s={s} changing={changing} />}
      {/* A paused sandbox is resumed by the terminal's or the file browser's first call. */}
      {active === "Terminal" && (usable ? <Terminal id={id} /> : <p className="muted">the sandbox is not running</p>)}
      {active === "Files" && (usable ? <FileBrowser id={id} /> : <p className="muted">the sandbox is not running</p>)}
      {active === "Processes" && running && <Processes id={id} />}
      {active === "Logs" && <Logs id={id} hasMain={!!s?.main} />}
      {/* A paused or stopped sandbox's network is the one it keeps for when it runs again. */}
      {active === "Network" &&
        (running || s?.state === "paused" || s?.state === "stopped" ? <NetworkTab id={id} onError={setError} /> : <p className="muted">the sandbox is not running</p>)}
      {active === "Desktop" && s && <DesktopTab id={id} state={s.state} />}
    </div>
  );
}

/** The balloon: how much of its memory a running sandbox may use now, changed without a restart. */
function Balloon({ id }: { id: string }) {
  const b = useData<any>(() => api("GET", `/sandboxes/${q(id)}/balloon`), [id], 5000);
  const [size, setSize] = useState("");
  const [error, setError] = useState<string | null>(null);
  return (
    <>
      <dt>Balloon</dt>
      <dd data-testid="balloon">
        {b.data ? `${b.data.actual_mb} of ${b.data.memory_mb} MiB usable (the guest sees ${b.data.guest_total_mb} MiB, ${b.data.guest_available_mb} available) ` : "… "}
        <input aria-label="Memory to leave it (MiB)" type="number" min={96} value={size} onChange={(e) => setSize(e.target.value)} style={{ width: "6em" }} />{" "}
        <Action
          label="Set"
          title="give the rest back to the host; the sandbox keeps running"
          onError={setError}
          run={async () => {
            await api("PUT", `/sandboxes/${q(id)}/balloon`, { memory_mb: Number(size) });
            b.reload();
          }}
        />
        {error && <span className="error-text"> {error}</span>}
      </dd>
    </>
  );
}

function Overview({ s, changing }: { s: any; changing: boolean }) {
  const [range, setRange] = useState("10 m");
  const m = useData<any>(() => api("GET", `/sandboxes/${q(s.id)}/metrics?since=${RANGES[range]}`), [s.id, range], 5000);
  const samples: any[] = m.data?.samples ?? [];
  const ts = samples.map((x) => x.ts);
  const col = (k: string) => samples.map((x) => x[k]);
  return (
    <>
      <Card title="Details">
        <dl className="details">
          <dt>Image</dt>
          <dd>{s.image}</dd>
          <dt>Name</dt>
          <dd>{s.name ?? "–"}</dd>
          <dt>Memory / vCPUs</dt>
          <dd>
            {s.memory_mb} MiB / {s.vcpus}
          </dd>
          <dt>Created</dt>
          <dd>{relative(s.created_at)}</dd>
          <dt>Expires</dt>
          <dd>{s.expires_at === null ? "never (until removed)" : relative(s.expires_at)}</dd>
          <dt>Network</dt>
          <dd>{s.network?.mode ?? "none"}</dd>
          {s.idle && (
            <>
              <dt>When idle</dt>
              <dd data-testid="idle">
                {s.idle.action} after {s.idle.after}
              </dd>
            </>
          )}
          {s.init && (
            <>
              <dt>Init</dt>
              <dd data-testid="init">{s.init}, with the agent as its first service</dd>
            </>
          )}
          {s.forkable && (
            <>
              <dt>Memory</dt>
              <dd data-testid="forkable">its own RAM file (forks copy it; pauses hand it over)</dd>
            </>
          )}
          {s.paused_reason && (
            <>
              <dt>Paused</dt>
              <dd data-testid="paused-reason">{s.paused_reason === "idle" ? "when idle (any use resumes it)" : s.paused_reason === "timeout" ? "at its timeout" : "on request"}</dd>
            </>
          )}
          {s.main && (
            <>
              <dt>Main process</dt>
              <dd className="mono" data-testid="main-command">
                {(s.main.command ?? []).join(" ")}
              </dd>
              <dt>Restart policy</dt>
              <dd data-testid="main-restart">
                {s.main.restart}
                {s.main.max_restarts !== undefined ? ` (at most ${s.main.max_restarts})` : ""}, restarted {s.main.restarts ?? 0} times,{" "}
                {s.main.running ? "running" : s.main.exit_code !== null && s.main.exit_code !== undefined ? `exited with ${s.main.exit_code}` : "not running"}
              </dd>
            </>
          )}
          {(s.network?.ports ?? []).length > 0 && (
            <>
              <dt>Published ports</dt>
              <dd data-testid="ports">
                {s.network.ports.map((p: any) => {
                  // 0.0.0.0 is every address of the host: the page's own host is one of them.
                  const host = p.host_ip === "0.0.0.0" || p.host_ip === "::" ? window.location.hostname : p.host_ip;
                  return (
                    <a key={p.host_port} className="mono port-link" href={`http://${host}:${p.host_port}/`} target="_blank" rel="noreferrer">
                      {host}:{p.host_port} → {p.guest_port}
                    </a>
                  );
                })}
              </dd>
            </>
          )}
          {s.state === "running" && !changing && <Balloon id={s.id} />}
          <dt>Provider</dt>
          <dd>
            {s.provider}
            {s.node ? ` on node ${s.node}` : ""}
          </dd>
          {s.warning && (
            <>
              <dt>Warning</dt>
              <dd className="error-text">{s.warning}</dd>
            </>
          )}
          {s.error && (
            <>
              <dt>Error</dt>
              <dd className="error-text">{s.error}</dd>
            </>
          )}
          {s.metadata && Object.keys(s.metadata).length > 0 && (
            <>
              <dt>Metadata</dt>
              <dd className="mono">{JSON.stringify(s.metadata)}</dd>
            </>
          )}
        </dl>
      </Card>
      <div className="page-head">
        <h3>Metrics</h3>
        <Tabs tabs={Object.keys(RANGES)} active={range} onChange={setRange} />
      </div>
      <ErrorBox error={m.error} />
      <div className="grid2" data-testid="charts">
        <Card title="CPU">
          <Chart
            title="CPU"
            ts={ts}
            format={pct}
            series={[
              { label: "guest", color: "var(--c1)", values: col("guest_cpu_pct") },
              { label: "VMM on host", color: "var(--c3)", values: col("cpu_pct") },
            ]}
          />
        </Card>
        <Card title="Memory">
          <Chart
            title="Memory"
            ts={ts}
            format={bytes}
            series={[
              { label: "guest used", color: "var(--c2)", values: col("mem_used_bytes") },
              { label: "host RSS", color: "var(--c3)", values: col("rss_bytes") },
            ]}
          />
        </Card>
        <Card title="Disk I/O (host)">
          <Chart
            title="Disk"
            ts={ts}
            format={rate}
            series={[
              { label: "read", color: "var(--c1)", values: col("disk_read_bps") },
              { label: "write", color: "var(--c4)", values: col("disk_write_bps") },
            ]}
          />
        </Card>
        <Card title="Network (guest)">
          <Chart
            title="Network"
            ts={ts}
            format={rate}
            series={[
              { label: "in", color: "var(--c2)", values: col("net_rx_bps") },
              { label: "out", color: "var(--c4)", values: col("net_tx_bps") },
            ]}
          />
        </Card>
      </div>
    </>
  );
}

function Processes({ id }: { id: string }) {
  const top = useData<any[]>(() => api("GET", `/sandboxes/${q(id)}/top`), [id], 3000);
  return (
    <>
      <ErrorBox error={top.error} />
      <table className="list">
        <thead>
          <tr>
            <th className="num">PID</th>
            <th className="num">PPID</th>
            <th>User</th>
            <th>State</th>
            <th className="num">RSS</th>
            <th className="num">CPU</th>
            <th>Command</th>
          </tr>
        </thead>
        <tbody>
          {(top.data ?? []).map((p) => (
            <tr key={p.pid}>
              <td className="num">{p.pid}</td>
              <td className="num">{p.ppid}</td>
              <td>{p.user}</td>
              <td>{p.state}</td>
              <td className="num">{bytes(p.rss_bytes)}</td>
              <td className="num">{p.cpu_seconds.toFixed(2)}s</td>
              <td className="mono">{p.command}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

/** The main process's output (what `forgevm logs` shows), when the sandbox runs one, and the serial console. */
function Logs({ id, hasMain }: { id: string; hasMain: boolean }) {
  const logs = useData<string[]>(() => api("GET", `/sandboxes/${q(id)}/logs?lines=500`), [id], 5000);
  const main = useData<{ lines: { ts: string; stream: string; line: string }[] } | null>(
    () => (hasMain ? api("GET", `/sandboxes/${q(id)}/main/logs?tail=500`) : Promise.resolve(null)),
    [id, hasMain],
    3000,
  );
  return (
    <>
      {hasMain && (
        <Card title="Main process">
          <ErrorBox error={main.error} />
          <pre className="log" data-testid="main-log">
            {(main.data?.lines ?? []).map((l) => (l.stream === "stderr" ? `! ${l.line}` : l.line)).join("\n") || "no output yet"}
          </pre>
        </Card>
      )}
      <Card title="Serial console">
        <ErrorBox error={logs.error} />
        <pre className="log" data-testid="console-log">
          {(logs.data ?? []).join("\n") || "the console is empty"}
        </pre>
      </Card>
    </>
  );
}
