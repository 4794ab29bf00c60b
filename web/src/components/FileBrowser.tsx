// A sandbox's files: browse, upload (with progress), download, edit text in place, make
// directories, rename and delete — each through the files routes of the REST API.
import type { FileInfo } from "forgevm";
import { useState } from "react";
import { api, apiStream, bytes, q, upload } from "../api";
import { ErrorBox, useData } from "../ui";

const join = (dir: string, name: string) => `${dir.replace(/\/+$/, "")}/${name}`;
const parent = (p: string) => p.replace(/\/[^/]*\/?$/, "") || "/";
/** Files up to this size open in the editor. */
const EDIT_MAX = 1024 * 1024;

export function FileBrowser({ id }: { id: string }) {
  const base = `/sandboxes/${q(id)}`;
  const [dir, setDir] = useState("/root");
  const [error, setError] = useState<string | null>(null);
  const [progress, setProgress] = useState<string | null>(null);
  const [editing, setEditing] = useState<{ path: string; text: string } | null>(null);
  const list = useData<FileInfo[]>(() => api("GET", `${base}/files/list?path=${q(dir)}`), [id, dir]);
  const act = async (f: () => Promise<unknown>) => {
    setError(null);
    try {
      await f();
      list.reload();
    } catch (e) {
      setError((e as Error).message);
    }
  };
  const open = (f: FileInfo) =>
    act(async () => {
      if (f.is_dir) return setDir(f.path);
      if (f.size > EDIT_MAX) throw new Error(`${f.name} is ${bytes(f.size)}: download it instead`);
      const r = await apiStream("GET", `${base}/files?path=${q(f.path)}`);
      setEditing({ path: f.path, text: await r.text() });
    });
  const download = (f: FileInfo) =>
    act(async () => {
      const blob = await (await apiStream("GET", f.is_dir ? `${base}/archive?path=${q(f.path)}` : `${base}/files?path=${q(f.path)}`)).blob();
      const a = document.createElement("a");
      a.href = URL.createObjectURL(blob);
      a.download = f.is_dir ? `${f.name}.tar` : f.name;
      a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
    });
  const sorted = [...(list.data ?? [])].sort((a, b) => Number(b.is_dir) - Number(a.is_dir) || a.name.localeCompare(b.name));
  return (
    <div className="files">
      <div className="toolbar">
        <button type="button" onClick={() => setDir(parent(dir))} disabled={dir === "/"} aria-label="up">
          ↑
        </button>
        <form
          onSubmit={(e) => {
            e.preventDefault();
            setDir(String(new FormData(e.currentTarget).get("dir") || "/"));
          }}
        >
          <input name="dir" key={dir} defaultValue={dir} aria-label="directory" className="path" />
        </form>
        <label className="button">
          Upload
          <input
            type="file"
            hidden
            multiple
            data-testid="upload"
            onChange={(e) => {
              const files = [...(e.currentTarget.files ?? [])];
              e.currentTarget.value = "";
              void act(async () => {
                for (const f of files) {
                  await upload(`${base}/files?path=${q(join(dir, f.name))}`, f, (sent, total) => setProgress(`${f.name}: ${Math.round((sent / Math.max(1, total)) * 100)}%`));
                  setProgress(`${f.name}: uploaded`);
                }
              });
            }}
          />
        </label>
        <button
          type="button"
          onClick={() => {
            const name = window.prompt("New directory name");
            if (name) void act(() => api("POST", `${base}/exec`, { command: "mkdir", args: ["-p", "--", join(dir, name)] }).then(checkExit));
          }}
        >
          New folder
        </button>
        <button
          type="button"
          onClick={() => {
            const name = window.prompt("New file name");
            if (name) void act(() => api("POST", `${base}/files`, { path: join(dir, name), content: "" }));
          }}
        >
          New file
        </button>
        {progress && (
          <span className="muted" data-testid="upload-progress">
            {progress}
          </span>
        )}
      </div>
      <ErrorBox error={error ?? list.error} onClose={() => setError(null)} />
      {editing ? (
        <Editor
          path={editing.path}
          text={editing.text}
          onClose={() => setEditing(null)}
          onSave={(text) =>
            act(async () => {
              await api("POST", `${base}/files`, { path: editing.path, content: text });
              setEditing(null);
            })
          }
        />
      ) : (
        <table className="list">
          <thead>
            <tr>
              <th>Name</th>
              <th className="num">Size</th>
              <th>Mode</th>
              <th>Modified</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {sorted.map((f) => (
              <tr key={f.path} data-file={f.name}>
                <td>
                  <button type="button" className="link" onClick={() => void open(f)}>
                    {f.is_dir ? "📁 " : ""}
                    {f.name}
                  </button>
                </td>
                <td className="num">{f.is_dir ? "" : bytes(f.size)}</td>
                <td className="mono">{f.mode}</td>
                <td>{new Date(f.mod_time).toLocaleString()}</td>
                <td className="row-actions">
                  <button type="button" onClick={() => void download(f)}>
                    Download
                  </button>
                  <button
                    type="button"
                    onClick={() => {
                      const to = window.prompt("Rename to", f.path);
                      if (to && to !== f.path) void act(() => api("POST", `${base}/files/move`, { old_path: f.path, new_path: to }));
                    }}
                  >
                    Rename
                  </button>
                  <button
                    type="button"
                    className="danger"
                    onClick={() => {
                      if (window.confirm(`Delete ${f.path}${f.is_dir ? " and everything in it" : ""}?`))
                        void act(() => api("DELETE", `${base}/files?path=${q(f.path)}&recursive=${f.is_dir}`));
                    }}
                  >
                    Delete
                  </button>
                </td>
              </tr>
            ))}
            {list.data && !sorted.length && (
              <tr>
                <td colSpan={5} className="muted">
                  empty directory
                </td>
              </tr>
            )}
          </tbody>
        </table>
      )}
    </div>
  );
}

function checkExit(r: { exit_code: number; stderr: string }) {
  if (r.exit_code !== 0) throw new Error(r.stderr.trim() || `exit code ${r.exit_code}`);
}

function Editor(props: { path: string; text: string; onSave: (t: string) => void; onClose: () => void }) {
  const [text, setText] = useState(props.text);
  return (
    <div className="editor">
      <div className="toolbar">
        <strong className="mono">{props.path}</strong>
        <button type="button" className="primary" onClick={() => props.onSave(text)}>
          Save
        </button>
        <button type="button" onClick={props.onClose}>
          Close
        </button>
      </div>
      <textarea value={text} onChange={(e) => setText(e.target.value)} spellCheck={false} aria-label="file contents" />
    </div>
  );
}
