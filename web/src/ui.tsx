// Small pieces every page uses: data loading with refresh, error display, tabs, buttons that
// show they are busy, and the hash router.
import { type ReactNode, useCallback, useEffect, useRef, useState } from "react";
import { ApiError } from "./api";

/** Loads `load()` now, again when `deps` change, and every `everyMs` if given; `reload` on demand. */
export function useData<T>(load: () => Promise<T>, deps: unknown[], everyMs?: number): { data: T | null; error: string | null; reload: () => Promise<void> } {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const current = useRef(load);
  current.current = load;
  // Settles once the new data (or error) is in, so an action can wait for the page to show its effect.
  const reload = useCallback(() => {
    return current.current().then(
      (d) => {
        setData(d);
        setError(null);
      },
      (e: Error) => setError(e.message),
    );
  }, []);
  // The caller's deps decide when to load again; as a string they fit in one literal list.
  const key = JSON.stringify(deps);
  useEffect(() => {
    if (key === undefined) return;
    reload();
    if (!everyMs) return;
    const t = setInterval(reload, everyMs);
    return () => clearInterval(t);
  }, [key, everyMs, reload]);
  return { data, error, reload };
}

/** The API's message for a failed action, where the person sees it. */
export function ErrorBox({ error, onClose }: { error: string | null; onClose?: () => void }) {
  if (!error) return null;
  return (
    <div className="error" role="alert">
      <span>{error}</span>
      {onClose && (
        <button type="button" className="link" onClick={onClose} aria-label="dismiss">
          ×
        </button>
      )}
    </div>
  );
}

/** A button that runs an async action, shows it is busy, and reports its error through onError. */
export function Action(props: { label: string; run: () => Promise<unknown>; onError: (m: string | null) => void; kind?: "primary" | "danger"; confirm?: string; title?: string }) {
  const [busy, setBusy] = useState(false);
  return (
    <button
      type="button"
      className={props.kind ?? ""}
      disabled={busy}
      title={props.title}
      onClick={async () => {
        if (props.confirm && !window.confirm(props.confirm)) return;
        setBusy(true);
        props.onError(null);
        try {
          await props.run();
        } catch (e) {
          props.onError(e instanceof ApiError || e instanceof Error ? e.message : String(e));
        } finally {
          setBusy(false);
        }
      }}
    >
      {busy ? `${props.label}…` : props.label}
    </button>
  );
}

export function Tabs({ tabs, active, onChange }: { tabs: string[]; active: string; onChange: (t: string) => void }) {
  return (
    <div className="tabs" role="tablist">
      {tabs.map((t) => (
        <button type="button" key={t} role="tab" aria-selected={t === active} className={t === active ? "active" : ""} onClick={() => onChange(t)}>
          {t}
        </button>
      ))}
    </div>
  );
}

export function Card({ title, children, actions }: { title?: string; children: ReactNode; actions?: ReactNode }) {
  return (
    <section className="card">
      {(title || actions) && (
        <header>
          {title && <h3>{title}</h3>}
          <div className="actions">{actions}</div>
        </header>
      )}
      {children}
    </section>
  );
}

/** A state's badge: its word, in the colour of `tone` (a state with the same meaning) when given. */
export function StateBadge({ state, tone }: { state: string; tone?: string }) {
  return <span className={`badge state-${tone ?? state}`}>{state}</span>;
}

/** The current hash route ("#/sandboxes/sb-1" → ["sandboxes", "sb-1"]) and a way to go elsewhere. */
export function useRoute(): string[] {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    window.addEventListener("hashchange", on);
    return () => window.removeEventListener("hashchange", on);
  }, []);
  return hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
}

export function go(path: string): void {
  location.hash = `#/${path}`;
}

/** Egress rules as the API takes them: per host, the headers the egress proxy adds. */
export type EgressRules = Record<string, { headers: Record<string, string> }>;

/**
 * "HOST: Header=value" lines (the CLI's --egress-header) → egress rules; a line that is not
 * one is an error naming it. `{{NAME}}` in a value names a stored secret.
 */
export function parseEgressHeaders(text: string): EgressRules | undefined {
  const out: EgressRules = {};
  for (const line of text
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean)) {
    const m = /^([^:\s]+)\s*:\s*([^=\s]+)\s*=(.*)$/.exec(line);
    if (!m) throw new Error(`egress headers: "${line}" is not HOST: Header=value`);
    const rule = (out[m[1]] ??= { headers: {} });
    rule.headers[m[2]] = m[3].trim();
  }
  return Object.keys(out).length ? out : undefined;
}

/** Egress rules → the lines parseEgressHeaders reads. */
export function egressHeaderLines(rules: EgressRules | undefined): string {
  return Object.entries(rules ?? {})
    .flatMap(([host, r]) => Object.entries(r.headers).map(([name, value]) => `${host}: ${name}=${value}`))
    .join("\n");
}

/** "KEY=value" lines → an object; a line without "=" is an error naming it. */
export function parsePairs(text: string, what: string): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  for (const line of text
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean)) {
    const eq = line.indexOf("=");
    if (eq <= 0) throw new Error(`${what}: "${line}" is not KEY=value`);
    out[line.slice(0, eq)] = line.slice(eq + 1);
  }
  return Object.keys(out).length ? out : undefined;
}
