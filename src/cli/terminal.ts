// An interactive command in a sandbox over the REST WebSocket (`shell`, `run -it`): a PTY in the
// guest, this terminal in raw mode, keystrokes (Ctrl-C included) sent as typed, the window size
// followed. Standard input that is not a terminal (a pipe, a test) is forwarded the same way and
// its end is the terminal's Ctrl-D.

export interface TerminalRequest {
  command: string;
  args?: string[];
  user?: string;
  workdir?: string;
  env?: Record<string, string>;
}

/** Runs `req` on a PTY in sandbox `id` of the server at `url`; resolves with its exit code. */
export async function interactive(url: string, apiKey: string | undefined, id: string, req: TerminalRequest): Promise<number> {
  const wsUrl = `${url.replace(/^http/, "ws")}/api/v1/sandboxes/${encodeURIComponent(id)}/exec/ws`;
  // Loaded here: most commands never open a terminal.
  const { default: WebSocket } = await import("ws");
  const ws = new WebSocket(wsUrl, { headers: apiKey ? { "X-API-Key": apiKey } : {} });
  const stdin = process.stdin;
  const raw = stdin.isTTY === true;
  const size = () => ({ rows: process.stdout.rows || 24, cols: process.stdout.columns || 80 });
  return new Promise<number>((resolve, reject) => {
    let code: number | null = null;
    const onInput = (c: Buffer) => ws.readyState === ws.OPEN && ws.send(JSON.stringify({ stdin: c.toString("utf8") }));
    const onEnd = () => ws.readyState === ws.OPEN && ws.send(JSON.stringify({ stdin_eof: true }));
    const onResize = () => {
      const { rows, cols } = size();
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ resize: [rows, cols] }));
    };
    const restore = () => {
      stdin.off("data", onInput);
      stdin.off("end", onEnd);
      process.stdout.off("resize", onResize);
      if (raw) stdin.setRawMode(false);
      stdin.pause();
    };
    ws.on("open", () => {
      ws.send(JSON.stringify({ ...req, tty: true, ...size() }));
      if (raw) stdin.setRawMode(true);
      stdin.on("data", onInput);
      stdin.once("end", onEnd);
      stdin.resume();
      process.stdout.on("resize", onResize);
    });
    ws.on("message", (data) => {
      let m: { stream?: string; data?: string; type?: string; exit_code?: number; code?: string; message?: string };
      try {
        m = JSON.parse(String(data));
      } catch {
        return;
      }
      if (m.stream && typeof m.data === "string") (m.stream === "stderr" ? process.stderr : process.stdout).write(m.data);
      else if (m.type === "done") code = m.exit_code ?? 1;
      else if (m.type === "error") {
        restore();
        reject(new Error(`${m.code}: ${m.message}`));
      }
    });
    ws.on("error", (e) => {
      restore();
      reject(new Error(`cannot reach the ForgeVM server at ${url}: ${(e as Error).message} (is \`forgevm serve\` running?)`));
    });
    ws.on("unexpected-response", (_req, res) => {
      let body = "";
      res.on("data", (c: Buffer) => (body += c));
      res.on("end", () => {
        restore();
        let msg = body;
        try {
          const j = JSON.parse(body);
          msg = `${j.code}: ${j.message}`;
        } catch {}
        reject(new Error(msg || `the server answered ${res.statusCode}`));
      });
    });
    ws.on("close", () => {
      restore();
      if (code !== null) resolve(code);
      else reject(new Error("the connection to the server closed before the command ended"));
    });
  });
}
