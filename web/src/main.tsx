// The web console: a login when the server wants a key, then the pages, routed by the URL's
// hash (the server serves one file for all of them).
import { StrictMode, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { ApiError, api, apiKey, setApiKey } from "./api";
import { Dashboard, PoolsCard } from "./pages/Dashboard";
import { Images, Snapshots, Templates } from "./pages/Images";
import { SandboxDetail } from "./pages/SandboxDetail";
import { Volumes } from "./pages/Volumes";
import { Secrets } from "./pages/Secrets";
import { LaunchForm, SandboxList } from "./pages/Sandboxes";
import "./styles.css";
import { ErrorBox, useRoute } from "./ui";

const NAV: [string, string][] = [
  ["", "Dashboard"],
  ["sandboxes", "Sandboxes"],
  ["images", "Images"],
  ["templates", "Templates"],
  ["snapshots", "Snapshots"],
  ["volumes", "Volumes"],
  ["secrets", "Secrets"],
  ["pools", "Pools"],
];

function useTheme(): [string, () => void] {
  const [theme, setTheme] = useState(() => localStorage.getItem("forgevm_theme") ?? (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light"));
  useEffect(() => {
    document.documentElement.dataset.theme = theme;
    localStorage.setItem("forgevm_theme", theme);
  }, [theme]);
  return [theme, () => setTheme((t) => (t === "dark" ? "light" : "dark"))];
}

function App() {
  const [auth, setAuth] = useState<"checking" | "ok" | "needed">("checking");
  const [version, setVersion] = useState("");
  const [theme, toggle] = useTheme();
  const route = useRoute();
  useEffect(() => {
    // /sandboxes needs the key when the server has one; /health answers anyone who has it.
    api("GET", "/sandboxes").then(
      () => setAuth("ok"),
      (e) => setAuth(e instanceof ApiError && e.status === 401 ? "needed" : "ok"),
    );
  }, []);
  useEffect(() => {
    if (auth === "ok")
      api("GET", "/health").then(
        (h) => setVersion(h.version),
        () => {},
      );
  }, [auth]);
  if (auth === "checking") return null;
  if (auth === "needed") return <Login onDone={() => setAuth("ok")} />;
  const [section, id, tab] = route;
  let page = <Dashboard />;
  if (section === "sandboxes") page = id === "new" ? <LaunchForm image={tab} /> : id ? <SandboxDetail key={id} id={id} tab={tab} /> : <SandboxList />;
  else if (section === "images") page = <Images />;
  else if (section === "templates") page = <Templates />;
  else if (section === "snapshots") page = <Snapshots />;
  else if (section === "volumes") page = <Volumes />;
  else if (section === "secrets") page = <Secrets />;
  else if (section === "pools")
    page = (
      <div className="page">
        <h2>Pools</h2>
        <PoolsCard />
      </div>
    );
  return (
    <div className="app">
      <nav className="sidebar">
        <div className="brand">
          ForgeVM <span className="muted small">{version}</span>
        </div>
        {NAV.map(([path, label]) => (
          <a key={path} href={`#/${path}`} className={(section ?? "") === path ? "active" : ""}>
            {label}
          </a>
        ))}
        <div className="spacer" />
        <button type="button" className="link" onClick={toggle}>
          {theme === "dark" ? "Light theme" : "Dark theme"}
        </button>
        {apiKey() && (
          <button
            type="button"
            className="link"
            onClick={() => {
              setApiKey("");
              location.reload();
            }}
          >
            Log out
          </button>
        )}
      </nav>
      <main>{page}</main>
    </div>
  );
}

function Login({ onDone }: { onDone: () => void }) {
  const [error, setError] = useState<string | null>(null);
  return (
    <div className="login">
      <form
        className="card form"
        onSubmit={async (e) => {
          e.preventDefault();
          const key = String(new FormData(e.currentTarget).get("key") ?? "").trim();
          setApiKey(key);
          try {
            await api("GET", "/sandboxes");
            onDone();
          } catch (err) {
            setApiKey("");
            setError((err as Error).message);
          }
        }}
      >
        <h2>ForgeVM</h2>
        <p className="muted">This server asks for its API key (auth.api_key in its config). It stays in this browser.</p>
        <label>
          API key
          <input name="key" type="password" autoComplete="current-password" required />
        </label>
        <ErrorBox error={error} />
        <button type="submit" className="primary">
          Log in
        </button>
      </form>
    </div>
  );
}

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
