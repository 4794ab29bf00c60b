// Secrets kept on the server: egress rules name them ({{NAME}}) and the egress proxy adds them to
// requests for their destinations; no sandbox ever sees one. Add, give a new value, remove. A
// value goes to the server once, from a password field, and never comes back.
import { api, q, relative } from "../api";
import { Action, Card, ErrorBox, useData } from "../ui";
import { useState } from "react";

export function Secrets() {
  const list = useData<any[]>(() => api("GET", "/secrets"), [], 5000);
  const [error, setError] = useState<string | null>(null);
  const [updating, setUpdating] = useState<string | null>(null);
  return (
    <div className="page">
      <h2>Secrets</h2>
      <Card title="New secret">
        <form
          className="toolbar"
          onSubmit={async (e) => {
            e.preventDefault();
            const form = e.currentTarget;
            const f = new FormData(form);
            const description = String(f.get("description") ?? "").trim();
            setError(null);
            try {
              await api("POST", "/secrets", { name: String(f.get("name") ?? "").trim(), value: String(f.get("value") ?? ""), ...(description ? { description } : {}) });
              form.reset();
              list.reload();
            } catch (err) {
              setError((err as Error).message);
            }
          }}
        >
          <input name="name" placeholder="name" aria-label="secret name" required />
          <input name="value" type="password" placeholder="value" aria-label="secret value" autoComplete="off" required />
          <input name="description" placeholder="description" aria-label="description" />
          <button type="submit" className="primary">
            Add
          </button>
          <span className="muted">a sandbox's egress rule adds it to requests for a host: Authorization: Bearer {"{{NAME}}"}</span>
        </form>
      </Card>
      <ErrorBox error={error ?? list.error} onClose={() => setError(null)} />
      <table className="list">
        <thead>
          <tr>
            <th>Secret</th>
            <th className="num">Version</th>
            <th>Description</th>
            <th>Updated</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(list.data ?? []).map((s) => (
            <tr key={s.id}>
              <td>{s.name}</td>
              <td className="num">{s.version}</td>
              <td>{s.description ?? <span className="muted">–</span>}</td>
              <td>{relative(s.updated_at)}</td>
              <td className="row-actions">
                {updating === s.name ? (
                  <form
                    className="toolbar"
                    onSubmit={async (e) => {
                      e.preventDefault();
                      const value = String(new FormData(e.currentTarget).get("value") ?? "");
                      try {
                        await api("PUT", `/secrets/${q(s.name)}`, { value });
                        setUpdating(null);
                        list.reload();
                      } catch (err) {
                        setError((err as Error).message);
                      }
                    }}
                  >
                    <input name="value" type="password" placeholder="new value" aria-label={`new value of ${s.name}`} autoComplete="off" required />
                    <button type="submit">Save</button>
                  </form>
                ) : (
                  <button type="button" onClick={() => setUpdating(s.name)}>
                    New value
                  </button>
                )}
                <Action
                  label="Remove"
                  kind="danger"
                  confirm={`Remove secret ${s.name}? Rules that name it will fail their requests.`}
                  onError={setError}
                  run={() => api("DELETE", `/secrets/${q(s.name)}`).then(list.reload)}
                />
              </td>
            </tr>
          ))}
          {list.data && !list.data.length && (
            <tr>
              <td colSpan={5} className="muted">
                no secrets yet
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}
