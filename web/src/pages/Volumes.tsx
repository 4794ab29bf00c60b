// Named volumes: data that outlives sandboxes. Create, see who mounts them, remove.
import { api, bytes, q, relative } from "../api";
import { Action, Card, ErrorBox, useData } from "../ui";
import { useState } from "react";

export function Volumes() {
  const list = useData<any[]>(() => api("GET", "/volumes"), [], 5000);
  const [error, setError] = useState<string | null>(null);
  return (
    <div className="page">
      <h2>Volumes</h2>
      <Card title="New volume">
        <form
          className="toolbar"
          onSubmit={async (e) => {
            e.preventDefault();
            const f = new FormData(e.currentTarget);
            const size = Number(f.get("size_mb") || 0);
            setError(null);
            try {
              await api("POST", "/volumes", { name: String(f.get("name") ?? "").trim(), ...(size ? { size_mb: size } : {}) });
              list.reload();
            } catch (err) {
              setError((err as Error).message);
            }
          }}
        >
          <input name="name" placeholder="name" aria-label="volume name" required />
          <input name="size_mb" type="number" min={16} placeholder="1024 MiB" aria-label="size (MiB)" />
          <button type="submit" className="primary">
            Create
          </button>
          <span className="muted">mount one at launch with volumes NAME:/path[:ro] (forgevm spawn -v)</span>
        </form>
      </Card>
      <ErrorBox error={error ?? list.error} onClose={() => setError(null)} />
      <table className="list">
        <thead>
          <tr>
            <th>Volume</th>
            <th className="num">Size</th>
            <th className="num">Used</th>
            <th>Mounted by</th>
            <th>Created</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(list.data ?? []).map((v) => (
            <tr key={v.name}>
              <td>{v.name}</td>
              <td className="num">{bytes(v.size_mb * 1048576)}</td>
              <td className="num">{bytes(v.used_bytes)}</td>
              <td>
                {(v.mounted_by ?? []).map((m: any) => (
                  <a key={m.sandbox} href={`#/sandboxes/${m.sandbox}`}>
                    {m.sandbox}:{m.path}
                    {m.read_only ? ":ro" : ""}{" "}
                  </a>
                ))}
                {!v.mounted_by?.length && <span className="muted">–</span>}
              </td>
              <td>{relative(v.created_at)}</td>
              <td className="row-actions">
                <Action
                  label="Remove"
                  kind="danger"
                  confirm={`Remove volume ${v.name} and its data?`}
                  onError={setError}
                  run={() => api("DELETE", `/volumes/${q(v.name)}`).then(list.reload)}
                />
              </td>
            </tr>
          ))}
          {list.data && !list.data.length && (
            <tr>
              <td colSpan={6} className="muted">
                no volumes yet
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}
