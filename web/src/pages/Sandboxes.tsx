// Sandboxes: the list with filters, and the launch form (image or template, size, TTL, network
// with presets, ports, environment, secrets).
import { useState } from "react";
import { api, q, relative } from "../api";
import { Card, ErrorBox, go, parseEgressHeaders, parsePairs, StateBadge, useData } from "../ui";

export function SandboxList() {
  const [filter, setFilter] = useState("");
  const [state, setState] = useState("live");
  const list = useData<any[]>(() => api("GET", `/sandboxes${state === "live" ? "" : state === "all" ? "?all=true" : `?state=${q(state)}`}`), [state], 3000);
  const f = filter.toLowerCase();
  const rows = (list.data ?? []).filter((s) => !f || [s.id, s.name, s.image, JSON.stringify(s.metadata ?? {})].some((v) => v && String(v).toLowerCase().includes(f)));
  return (
    <div className="page">
      <div className="page-head">
        <h2>Sandboxes</h2>
        <button type="button" className="primary" onClick={() => go("sandboxes/new")}>
          Launch sandbox
        </button>
      </div>
      <div className="toolbar">
        <input placeholder="Filter by id, name, image, metadata" value={filter} onChange={(e) => setFilter(e.target.value)} aria-label="filter" />
        <select value={state} onChange={(e) => setState(e.target.value)} aria-label="state">
          <option value="live">live</option>
          <option value="running">running</option>
          <option value="paused">paused</option>
          <option value="stopped">stopped</option>
          <option value="all">all, history included</option>
        </select>
      </div>
      <ErrorBox error={list.error} />
      <table className="list" data-testid="sandbox-list">
        <thead>
          <tr>
            <th>Sandbox</th>
            <th>State</th>
            <th>Image</th>
            <th className="num">Memory</th>
            <th className="num">vCPUs</th>
            <th>Created</th>
            <th>Expires</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((s) => (
            <tr key={s.id} data-sandbox={s.id}>
              <td>
                <a href={`#/sandboxes/${s.id}`}>{s.id}</a>
                {s.name && <span className="muted"> {s.name}</span>}
              </td>
              <td>
                <StateBadge state={s.state} />
              </td>
              <td>{s.image}</td>
              <td className="num">{s.memory_mb} MiB</td>
              <td className="num">{s.vcpus}</td>
              <td>{relative(s.created_at)}</td>
              <td>{s.state !== "running" ? "–" : s.expires_at === null ? "never" : relative(s.expires_at)}</td>
            </tr>
          ))}
          {list.data && !rows.length && (
            <tr>
              <td colSpan={7} className="muted">
                no sandboxes {filter ? "match" : "yet"}
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}

const PRESETS = ["@pypi", "@npm", "@github", "@debian", "@ubuntu", "@alpine", "@crates", "@golang", "@huggingface"];

/** A command line as words, as a shell splits it: spaces apart, quotes keep them together. */
export function shellWords(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/"((?:[^"\\]|\\.)*)"|'([^']*)'|(\S+)/g)) out.push(m[1] !== undefined ? m[1].replace(/\\(.)/g, "$1") : (m[2] ?? m[3]));
  return out;
}

/** The launch form; `image` (from an image's "Launch…") is chosen at first. */
export function LaunchForm({ image }: { image?: string } = {}) {
  const images = useData<any[]>(() => api("GET", "/images"), []);
  const templates = useData<any[]>(() => api("GET", "/templates"), []);
  const providers = useData<any[]>(() => api("GET", "/providers"), []);
  const [source, setSource] = useState<"image" | "template">("image");
  const [network, setNetwork] = useState("none");
  const [presets, setPresets] = useState<string[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (form: FormData) => {
    setError(null);
    setBusy(true);
    try {
      const s = (k: string) => String(form.get(k) ?? "").trim();
      const n = (k: string) => (s(k) ? Number(s(k)) : undefined);
      const allow = [
        ...presets,
        ...s("allow")
          .split(/[\s,]+/)
          .filter(Boolean),
      ];
      const body: Record<string, unknown> = {
        name: s("name") || undefined,
        memory_mb: n("memory_mb"),
        vcpus: n("vcpus"),
        ttl: s("ttl") || undefined,
        network,
        allow: network === "allowlist" ? allow : undefined,
        ports: s("ports")
          ? s("ports")
              .split(/[\s,]+/)
              .filter(Boolean)
          : undefined,
        env: parsePairs(s("env"), "environment"),
        secrets: parsePairs(s("secrets"), "secrets"),
        egress_rules: network === "allowlist" ? parseEgressHeaders(s("egress_headers")) : undefined,
        disk_mb: n("disk_mb"),
        volumes: s("volumes") ? s("volumes").split(/\s+/).filter(Boolean) : undefined,
        idle: s("idle_pause") ? { after: s("idle_pause"), action: "pause" } : undefined,
        forkable: form.get("forkable") === "on" ? true : undefined,
      };
      // A command, or a restart policy, makes it a service: its main process (the image's own command when none is given).
      const command = shellWords(s("command"));
      const restart = s("restart") || "no";
      if (command.length || restart !== "no") body.main = { ...(command.length ? { command } : {}), restart };
      if (s("provider")) body.provider = s("provider");
      if (source === "template") body.template = s("template");
      else body.image = s("image") || undefined;
      const sb = await api("POST", "/sandboxes", body);
      go(`sandboxes/${sb.id}`);
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="page narrow">
      <h2>Launch a sandbox</h2>
      <form
        className="form"
        onSubmit={(e) => {
          e.preventDefault();
          void submit(new FormData(e.currentTarget));
        }}
      >
        <fieldset>
          <legend>From</legend>
          <label className="inline">
            <input type="radio" checked={source === "image"} onChange={() => setSource("image")} /> an image
          </label>
          <label className="inline">
            <input type="radio" checked={source === "template"} onChange={() => setSource("template")} /> a template
          </label>
          {source === "image" ? (
            <label>
              Image
              {/* Mounted again once the images are in, so the image asked for is chosen. */}
              <select name="image" defaultValue={image ?? ""} key={images.data ? "images" : "loading"}>
                <option value="">the server's default</option>
                {(images.data ?? []).map((i) => (
                  <option key={i.name} value={i.name}>
                    {i.name}
                  </option>
                ))}
              </select>
            </label>
          ) : (
            <label>
              Template
              <select name="template" required>
                {(templates.data ?? []).map((t) => (
                  <option key={t.name} value={t.name}>
                    {t.name}
                  </option>
                ))}
              </select>
            </label>
          )}
          {(providers.data ?? []).length > 1 && (
            <label>
              Provider
              <select name="provider" defaultValue="">
                <option value="">the template's, else the server's default</option>
                {(providers.data ?? []).map((p) => (
                  <option key={p.name} value={p.name} disabled={!p.healthy}>
                    {p.name}
                    {p.default ? " (default)" : ""}
                    {p.isolation === "namespaces" ? " — no VM: not a security boundary" : ""}
                    {p.healthy ? "" : " — unavailable"}
                  </option>
                ))}
              </select>
            </label>
          )}
        </fieldset>
        <div className="row">
          <label>
            Name
            <input name="name" placeholder="optional" pattern="[a-zA-Z0-9][a-zA-Z0-9_.\-]*" />
          </label>
          <label>
            Memory (MiB)
            <input name="memory_mb" type="number" min={64} max={65536} placeholder="512" />
          </label>
          <label>
            vCPUs
            <input name="vcpus" type="number" min={1} max={64} placeholder="1" />
          </label>
          <label>
            TTL
            <input name="ttl" placeholder="30m (0: until removed)" />
          </label>
          <label title="with nothing in flight for this long it is paused (no VM held); any use resumes it">
            Pause when idle for
            <input name="idle_pause" placeholder="e.g. 5m (empty: never)" />
          </label>
          <label>
            Disk (MiB)
            <input name="disk_mb" type="number" min={64} placeholder="2048" />
          </label>
          <label title="its RAM in a file of its own: a fork stops it only to copy that file, however many copies, and pauses copy no RAM">
            <input name="forkable" type="checkbox" /> Forkable (fast forks)
          </label>
        </div>
        <fieldset>
          <legend>Main process (a service, as docker run -d)</legend>
          <div className="row">
            <label>
              Command
              <input name="command" placeholder="the image's own (ENTRYPOINT and CMD)" aria-label="command" />
            </label>
            <label>
              Restart policy
              <select name="restart" defaultValue="no" aria-label="restart policy">
                <option value="no">no (not a service unless a command is given)</option>
                <option value="on-failure">on-failure</option>
                <option value="always">always</option>
                <option value="unless-stopped">unless-stopped</option>
              </select>
            </label>
          </div>
          <label>
            Volumes (volume:/path or volume:/path:ro, separated by spaces; made when missing)
            <input name="volumes" placeholder="data:/data" />
          </label>
        </fieldset>
        <fieldset>
          <legend>Network</legend>
          {["none", "allowlist", "full"].map((m) => (
            <label className="inline" key={m}>
              <input type="radio" name="network-mode" checked={network === m} onChange={() => setNetwork(m)} /> {m}
            </label>
          ))}
          {network === "allowlist" && (
            <>
              <div className="presets">
                {PRESETS.map((p) => (
                  <label className="inline" key={p}>
                    <input type="checkbox" checked={presets.includes(p)} onChange={(e) => setPresets((l) => (e.target.checked ? [...l, p] : l.filter((x) => x !== p)))} /> {p}
                  </label>
                ))}
              </div>
              <label>
                Also allow (hosts, *.domains, CIDRs, :ports)
                <input name="allow" placeholder="example.com api.example.org:443" />
              </label>
              <label title="the egress proxy adds these headers to requests for HOST; {{NAME}} is a secret stored on the Secrets page, whose value never enters the sandbox">
                Egress headers (HOST: Header=value per line; {"{{NAME}}"} names a stored secret)
                <textarea name="egress_headers" rows={2} placeholder="api.openai.com: Authorization=Bearer {{OPENAI_KEY}}" aria-label="egress headers" />
              </label>
            </>
          )}
          <label>
            Published ports (HOST:GUEST, or GUEST for any free host port)
            <input name="ports" placeholder="8080:80" />
          </label>
        </fieldset>
        <div className="row">
          <label>
            Environment (KEY=value per line)
            <textarea name="env" rows={3} />
          </label>
          <label>
            Secrets (KEY=value per line, never stored)
            <textarea name="secrets" rows={3} />
          </label>
        </div>
        <ErrorBox error={error} onClose={() => setError(null)} />
        <div className="actions">
          <button type="submit" className="primary" disabled={busy}>
            {busy ? "Launching…" : "Launch"}
          </button>
          <button type="button" onClick={() => go("sandboxes")}>
            Cancel
          </button>
        </div>
      </form>
      <Card title="Tip">
        <p className="muted">
          Every field is what <code>POST /api/v1/sandboxes</code> takes; the same launch from a script is <code>forgevm spawn</code>.
        </p>
      </Card>
    </div>
  );
}
