// A sandbox's network tab: its mode and allowlist, the headers its egress proxy adds (secrets
// named by placeholder, their values never shown), its published ports and its egress log.
import { useState } from "react";
import { api, q } from "../api";
import { Action, Card, egressHeaderLines, ErrorBox, parseEgressHeaders, useData } from "../ui";

export function NetworkTab({ id, onError }: { id: string; onError: (m: string | null) => void }) {
  const net = useData<any>(() => api("GET", `/sandboxes/${q(id)}/network`), [id]);
  const egress = useData<any[]>(() => api("GET", `/sandboxes/${q(id)}/egress?lines=200`), [id], 5000);
  const secrets = useData<any[]>(() => api("GET", "/secrets"), []);
  const [allow, setAllow] = useState<string | null>(null);
  const [rules, setRules] = useState<string | null>(null);
  const n = net.data;
  return (
    <>
      <ErrorBox error={net.error} />
      {n && (
        <div className="grid2">
          <Card title={`Mode: ${n.mode}`}>
            {n.mode === "allowlist" ? (
              <>
                <label>
                  Allowlist (one entry per line)
                  <textarea rows={6} value={allow ?? (n.allow ?? []).join("\n")} onChange={(e) => setAllow(e.target.value)} aria-label="allowlist" />
                </label>
                <Action
                  label="Save allowlist"
                  kind="primary"
                  onError={onError}
                  run={async () => {
                    await api("PUT", `/sandboxes/${q(id)}/network/allow`, {
                      allow: (allow ?? "")
                        .split("\n")
                        .map((l) => l.trim())
                        .filter(Boolean),
                    });
                    setAllow(null);
                    net.reload();
                  }}
                />
              </>
            ) : (
              <p className="muted">{n.mode === "none" ? "no network device: nothing leaves this sandbox" : "full network access (still never the host's own services)"}</p>
            )}
          </Card>
          <Card title="Egress headers">
            {n.mode === "allowlist" ? (
              <>
                <label title="the egress proxy adds these headers to requests for HOST; {{NAME}} is a secret stored on the Secrets page, whose value never enters the sandbox">
                  HOST: Header=value per line ({"{{NAME}}"} names a stored secret)
                  <textarea
                    rows={4}
                    value={rules ?? egressHeaderLines(n.egress_rules)}
                    onChange={(e) => setRules(e.target.value)}
                    placeholder="api.openai.com: Authorization=Bearer {{OPENAI_KEY}}"
                    aria-label="egress headers"
                  />
                </label>
                {!!secrets.data?.length && (
                  <p className="muted">
                    Stored secrets:{" "}
                    {secrets.data.map((s: any) => (
                      <code key={s.name}>{`{{${s.name}}}`} </code>
                    ))}
                  </p>
                )}
                <Action
                  label="Save egress headers"
                  kind="primary"
                  onError={onError}
                  run={async () => {
                    await api("PUT", `/sandboxes/${q(id)}/network/rules`, { egress_rules: parseEgressHeaders(rules ?? "") ?? {} });
                    setRules(null);
                    net.reload();
                  }}
                />
              </>
            ) : (
              <p className="muted">headers are added at egress in allowlist mode only</p>
            )}
          </Card>
          <Card title="Published ports">
            <table className="list">
              <tbody>
                {(n.ports ?? []).map((p: any) => (
                  <tr key={p.host_port}>
                    <td className="mono">
                      {p.host_ip}:{p.host_port} → {p.guest_port}
                    </td>
                    <td className="row-actions">
                      <Action label="Remove" onError={onError} run={() => api("DELETE", `/sandboxes/${q(id)}/ports/${p.host_port}`).then(net.reload)} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
            <form
              className="toolbar"
              onSubmit={async (e) => {
                e.preventDefault();
                const port = String(new FormData(e.currentTarget).get("port") ?? "");
                onError(null);
                try {
                  await api("POST", `/sandboxes/${q(id)}/ports`, { port });
                  net.reload();
                } catch (err) {
                  onError((err as Error).message);
                }
              }}
            >
              <input name="port" placeholder="8080:80" aria-label="port" />
              <button type="submit">Publish</button>
            </form>
          </Card>
        </div>
      )}
      <Card title="Egress log">
        <table className="list">
          <tbody>
            {[...(egress.data ?? [])].reverse().map((e, i) => (
              // biome-ignore lint/suspicious/noArrayIndexKey: log lines have no identity of their own, and the list only grows at one end
              <tr key={`${e.ts}-${i}`}>
                <td className="muted">{new Date(e.ts).toLocaleTimeString()}</td>
                <td>
                  <span className={`badge ${e.decision === "allow" ? "state-running" : "state-error"}`}>{e.decision}</span>
                </td>
                <td className="mono">
                  {e.method} {e.host}:{e.port}
                </td>
                <td className="muted">{e.reason}</td>
              </tr>
            ))}
            {!egress.data?.length && (
              <tr>
                <td className="muted">no requests yet</td>
              </tr>
            )}
          </tbody>
        </table>
      </Card>
    </>
  );
}
