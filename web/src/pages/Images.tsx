// Images (pull with progress, import an archive, remove), templates (create, edit, spawn,
// delete) and snapshots (restore, delete).
import { useState } from "react";
import { api, bytes, q, relative, upload } from "../api";
import { Action, Card, ErrorBox, go, parsePairs, StateBadge, useData } from "../ui";

export function Images() {
  const list = useData<any[]>(() => api("GET", "/images"), [], 10_000);
  const [error, setError] = useState<string | null>(null);
  const [pull, setPull] = useState<any | null>(null);
  const [importing, setImporting] = useState<string | null>(null);
  const startPull = async (image: string) => {
    setError(null);
    try {
      let job = await api("POST", "/images/pull", { image });
      setPull(job);
      while (job.state === "running") {
        await new Promise((r) => setTimeout(r, 500));
        job = await api("GET", `/images/pulls/${q(job.id)}`);
        setPull(job);
      }
      if (job.state === "error") setError(job.error);
      list.reload();
    } catch (e) {
      setError((e as Error).message);
    }
  };
  return (
    <div className="page">
      <h2>Images</h2>
      <Card title="Pull or import">
        <form
          className="toolbar"
          onSubmit={(e) => {
            e.preventDefault();
            const image = String(new FormData(e.currentTarget).get("image") ?? "").trim();
            if (image) void startPull(image);
          }}
        >
          <input name="image" placeholder="alpine:3.20 or registry.example.com/team/app:1.2" aria-label="image reference" className="wide" />
          <button type="submit" className="primary" disabled={pull?.state === "running"}>
            Pull
          </button>
          <label className="button">
            Import archive…
            <input
              type="file"
              hidden
              accept=".tar,.tar.gz,.tgz"
              onChange={(e) => {
                const f = e.currentTarget.files?.[0];
                e.currentTarget.value = "";
                if (!f) return;
                const name = window.prompt("Name the imported image (empty: the archive's own)") ?? "";
                setError(null);
                upload(`/images/import${name ? `?name=${q(name)}` : ""}`, f, (s, t) => setImporting(`${f.name}: ${Math.round((s / Math.max(1, t)) * 100)}%`)).then(
                  () => {
                    setImporting(`${f.name}: imported`);
                    list.reload();
                  },
                  (err: Error) => {
                    setImporting(null);
                    setError(err.message);
                  },
                );
              }}
            />
          </label>
        </form>
        {pull && (
          <div className="progress" data-testid="pull-progress" data-state={pull.state}>
            <div>
              <strong>{pull.image}</strong> <StateBadge state={pull.state} tone={pull.state === "done" ? "running" : pull.state === "error" ? "error" : "creating"} />
              {pull.digest && <span className="mono muted"> {pull.digest}</span>}
            </div>
            <progress max={Math.max(1, pull.progress_total)} value={pull.state === "done" ? Math.max(1, pull.progress_total) : pull.progress.length} />
            <pre className="log small">{pull.progress.slice(-6).join("\n")}</pre>
          </div>
        )}
        {importing && <p className="muted">{importing}</p>}
        <ErrorBox error={error ?? list.error} onClose={() => setError(null)} />
      </Card>
      <table className="list" data-testid="image-list">
        <thead>
          <tr>
            <th>Image</th>
            <th className="num">Size</th>
            <th>Source</th>
            <th>Created</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(list.data ?? []).map((i) => (
            <tr key={i.name} data-image={i.name}>
              <td>
                {i.name}
                {i.in_use && <span className="badge">in use</span>}
              </td>
              <td className="num">{bytes(i.size)}</td>
              <td className="muted">{i.source}</td>
              <td>{relative(i.created_at)}</td>
              <td className="row-actions">
                <button type="button" onClick={() => go(`sandboxes/new/${encodeURIComponent(i.name)}`)}>
                  Launch…
                </button>
                <Action label="Remove" kind="danger" confirm={`Remove image ${i.name}?`} onError={setError} run={() => api("DELETE", `/images/${q(i.name)}`).then(list.reload)} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

export function Templates() {
  const list = useData<any[]>(() => api("GET", "/templates"), []);
  const [error, setError] = useState<string | null>(null);
  const [editing, setEditing] = useState<any | null>(null);
  return (
    <div className="page">
      <div className="page-head">
        <h2>Templates</h2>
        <button type="button" className="primary" onClick={() => setEditing({})}>
          New template
        </button>
      </div>
      <ErrorBox error={error ?? list.error} onClose={() => setError(null)} />
      {editing && (
        <TemplateForm
          t={editing}
          onDone={() => {
            setEditing(null);
            list.reload();
          }}
        />
      )}
      <table className="list">
        <thead>
          <tr>
            <th>Template</th>
            <th>Image</th>
            <th className="num">Memory</th>
            <th className="num">vCPUs</th>
            <th>Setup</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(list.data ?? []).map((t) => (
            <tr key={t.name}>
              <td>{t.name}</td>
              <td>{t.image}</td>
              <td className="num">{t.memory_mb ?? "–"}</td>
              <td className="num">{t.vcpus ?? "–"}</td>
              <td className="mono small">{(t.setup ?? []).join(" && ")}</td>
              <td className="row-actions">
                <Action label="Spawn" kind="primary" onError={setError} run={async () => go(`sandboxes/${(await api("POST", `/templates/${q(t.name)}/spawn`, {})).id}`)} />
                <button type="button" onClick={() => setEditing(t)}>
                  Edit
                </button>
                <Action
                  label="Delete"
                  kind="danger"
                  confirm={`Delete template ${t.name}?`}
                  onError={setError}
                  run={() => api("DELETE", `/templates/${q(t.name)}`).then(list.reload)}
                />
              </td>
            </tr>
          ))}
          {list.data && !list.data.length && (
            <tr>
              <td colSpan={6} className="muted">
                no templates yet
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}

function TemplateForm({ t, onDone }: { t: any; onDone: () => void }) {
  const [error, setError] = useState<string | null>(null);
  const isNew = !t.name;
  return (
    <Card title={isNew ? "New template" : `Edit ${t.name}`}>
      <form
        className="form"
        onSubmit={async (e) => {
          e.preventDefault();
          const f = new FormData(e.currentTarget);
          const s = (k: string) => String(f.get(k) ?? "").trim();
          setError(null);
          try {
            const body: Record<string, unknown> = {
              image: s("image") || undefined,
              memory_mb: s("memory_mb") ? Number(s("memory_mb")) : undefined,
              vcpus: s("vcpus") ? Number(s("vcpus")) : undefined,
              ttl: s("ttl") || undefined,
              setup: s("setup")
                ? s("setup")
                    .split("\n")
                    .map((l) => l.trim())
                    .filter(Boolean)
                : undefined,
              env: parsePairs(s("env"), "environment"),
              description: s("description") || undefined,
              pool_size: s("pool_size") ? Number(s("pool_size")) : undefined,
              allowed_hosts: s("allowed_hosts")
                ? s("allowed_hosts")
                    .split(/[\s,]+/)
                    .filter(Boolean)
                : undefined,
              // Names only: the values come with each spawn (or from the server's FORGEVM_SECRET_NAME).
              secrets: s("secrets")
                ? s("secrets")
                    .split(/[\s,]+/)
                    .filter(Boolean)
                    .map((name) => ({ name }))
                : undefined,
            };
            if (isNew) await api("POST", "/templates", { name: s("name"), ...body });
            else await api("PUT", `/templates/${q(t.name)}`, body);
            onDone();
          } catch (err) {
            setError((err as Error).message);
          }
        }}
      >
        <div className="row">
          {isNew && (
            <label>
              Name
              <input name="name" required />
            </label>
          )}
          <label>
            Image
            <input name="image" defaultValue={t.image ?? ""} placeholder="the server's default" />
          </label>
          <label>
            Memory (MiB)
            <input name="memory_mb" type="number" defaultValue={t.memory_mb ?? ""} />
          </label>
          <label>
            vCPUs
            <input name="vcpus" type="number" defaultValue={t.vcpus ?? ""} />
          </label>
          <label>
            TTL
            <input name="ttl" defaultValue={typeof t.ttl === "string" ? t.ttl : ""} placeholder="30m" />
          </label>
        </div>
        <label>
          Description
          <input name="description" defaultValue={t.description ?? ""} />
        </label>
        <div className="row">
          <label>
            Warm pool (sandboxes kept ready)
            <input name="pool_size" type="number" min={0} max={64} defaultValue={t.pool_size ?? ""} placeholder="0" />
          </label>
          <label>
            Allowlist (its sandboxes reach only these: hosts, *.domains, @presets)
            <input name="allowed_hosts" defaultValue={(t.allowed_hosts ?? []).join(" ")} placeholder="none: no network" />
          </label>
          <label>
            Secrets its sandboxes need (their values are given at each launch)
            <input name="secrets" defaultValue={(t.secrets ?? []).map((x: { name: string }) => x.name).join(" ")} placeholder="API_TOKEN" />
          </label>
        </div>
        <div className="row">
          <label>
            Setup commands (one per line, run once when the template's snapshot is made)
            <textarea name="setup" rows={3} defaultValue={(t.setup ?? []).join("\n")} />
          </label>
          <label>
            Environment (KEY=value per line)
            <textarea
              name="env"
              rows={3}
              defaultValue={Object.entries(t.env ?? {})
                .map(([k, v]) => `${k}=${v}`)
                .join("\n")}
            />
          </label>
        </div>
        <ErrorBox error={error} onClose={() => setError(null)} />
        <div className="actions">
          <button type="submit" className="primary">
            Save
          </button>
          <button type="button" onClick={onDone}>
            Cancel
          </button>
        </div>
      </form>
    </Card>
  );
}

export function Snapshots() {
  const list = useData<any[]>(() => api("GET", "/snapshots"), [], 5000);
  const [error, setError] = useState<string | null>(null);
  return (
    <div className="page">
      <h2>Snapshots</h2>
      <ErrorBox error={error ?? list.error} onClose={() => setError(null)} />
      <table className="list" data-testid="snapshot-list">
        <thead>
          <tr>
            <th>Snapshot</th>
            <th>State</th>
            <th>From</th>
            <th>Image</th>
            <th className="num">Size</th>
            <th>Created</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(list.data ?? []).map((s) => (
            <tr key={s.id}>
              <td>
                {s.name ?? s.id} <span className="muted small">{s.kind}</span>
              </td>
              <td>
                <StateBadge state={s.state} tone={s.state === "ready" ? "running" : s.state} />
              </td>
              <td>{s.source_id ? <a href={`#/sandboxes/${s.source_id}`}>{s.source_id}</a> : "–"}</td>
              <td>{s.image}</td>
              <td className="num">{bytes(s.size_bytes)}</td>
              <td>{relative(s.created_at)}</td>
              <td className="row-actions">
                <Action
                  label="Restore"
                  kind="primary"
                  onError={setError}
                  run={async () => {
                    const r = await api("POST", `/snapshots/${q(s.name ?? s.id)}/spawn`, {});
                    go(`sandboxes/${(r.sandboxes ?? [r])[0].id}`);
                  }}
                />
                <Action
                  label="Delete"
                  kind="danger"
                  confirm={`Delete snapshot ${s.name ?? s.id}?`}
                  onError={setError}
                  run={() => api("DELETE", `/snapshots/${q(s.id)}`).then(list.reload)}
                />
              </td>
            </tr>
          ))}
          {list.data && !list.data.length && (
            <tr>
              <td colSpan={7} className="muted">
                no snapshots (take one from a sandbox's page)
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}
