// A terminal on a sandbox: xterm.js over the exec WebSocket with a PTY, resized with the page.
// The key reaches the WebSocket as a cookie (set at login): a browser cannot send it as a header.
import { FitAddon } from "@xterm/addon-fit";
import { Terminal as XTerm } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { useEffect, useRef, useState } from "react";
import { LOGIN_SHELL } from "../../../src/util/login-shell";

export function Terminal({ id }: { id: string }) {
  // A new session is a new terminal: remounted under a new key.
  const [session, setSession] = useState(0);
  return <Session key={session} id={id} again={() => setSession((n) => n + 1)} />;
}

function Session({ id, again }: { id: string; again: () => void }) {
  const box = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState("connecting");
  useEffect(() => {
    // Dark in both themes, as terminals usually are (the container's colour is the same).
    const term = new XTerm({
      cursorBlink: true,
      fontSize: 13,
      fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
      theme: { background: "#0d1117", foreground: "#e6edf3", cursor: "#e6edf3" },
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(box.current!);
    fit.fit();
    const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/v1/sandboxes/${encodeURIComponent(id)}/exec/ws`);
    const send = (m: unknown) => ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify(m));
    ws.onopen = () => {
      send({ ...LOGIN_SHELL, tty: true, rows: term.rows, cols: term.cols, env: { TERM: "xterm-256color" } });
      setStatus("connected");
      term.focus();
    };
    ws.onmessage = (e) => {
      const m = JSON.parse(String(e.data));
      if (typeof m.data === "string") term.write(m.data);
      else if (m.type === "done") setStatus(`exited with code ${m.exit_code}`);
      else if (m.type === "error") {
        setStatus("error");
        term.write(`\r\n\x1b[31m${m.message}\x1b[0m\r\n`);
      }
    };
    ws.onclose = () => setStatus((s) => (s === "connected" || s === "connecting" ? "disconnected" : s));
    const input = term.onData((d) => send({ stdin: d }));
    const resize = term.onResize(({ rows, cols }) => send({ resize: [rows, cols] }));
    const observer = new ResizeObserver(() => fit.fit());
    observer.observe(box.current!);
    return () => {
      observer.disconnect();
      input.dispose();
      resize.dispose();
      ws.close();
      term.dispose();
    };
  }, [id]);
  return (
    <div className="terminal-wrap">
      <div className="toolbar">
        <span className="muted" data-testid="terminal-status">
          {status}
        </span>
        {status !== "connected" && status !== "connecting" && (
          <button type="button" onClick={again}>
            New session
          </button>
        )}
      </div>
      <div className="terminal" ref={box} data-testid="terminal" />
    </div>
  );
}
