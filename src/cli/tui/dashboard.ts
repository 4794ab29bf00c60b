// The terminal dashboard's screen (ink): running sandboxes with live CPU and memory, the
// server's events as they happen, a sandbox's console log, and the keys that act on the
// selected sandbox. It talks to the server only through the SDK, as the console does over REST.
import { Box, Text, useApp, useInput, useStdout } from "ink";
import { createElement as h, type ReactNode, useCallback, useEffect, useRef, useState } from "react";
import type { Client, LiveStats, SandboxInfo } from "forgevm";
import { bytes } from "../../util/units.js";

/** What the dashboard asks its caller to do after it exits. */
export type Next = { shell: string } | null;

interface Row {
  info: SandboxInfo;
  cpu?: number | null;
  mem?: number | null;
  memTotal?: number | null;
}

const KEYS = "↑/↓ select · s spawn · enter shell · l logs · f fork · p pause/resume · d destroy · ? help · q quit";

/** What `?` shows: every key, with what it does. */
const HELP = [
  "↑ / k      select the sandbox above",
  "↓ / j      select the sandbox below",
  "enter      open a shell in the selected sandbox (exit comes back here)",
  "s          spawn a sandbox of the server's default image",
  "l          show the selected sandbox's console log (l or esc closes it)",
  "f          fork the selected sandbox",
  "p          pause the selected sandbox (no VM held; any use resumes it), or resume a paused one",
  "d          destroy the selected sandbox (y confirms)",
  "r          refresh now (it refreshes every 2 s)",
  "?          this help (any key closes it)",
  "q / ctrl-c quit",
];

export function Dashboard(props: { client: Client; url: string; done: (next: Next) => void; initialSelection?: string }): ReactNode {
  const { client } = props;
  const { exit } = useApp();
  const { stdout } = useStdout();
  const [rows, setRows] = useState<Row[]>([]);
  // The selection is a sandbox, not a position: a refresh that reorders the list keeps it. The
  // sandbox a shell was opened in is selected once, when it is first listed, and never again.
  const [selectedId, setSelectedId] = useState<string | undefined>(props.initialSelection);
  const [events, setEvents] = useState<string[]>([]);
  const [status, setStatus] = useState("");
  const [logs, setLogs] = useState<string[] | null>(null);
  const [help, setHelp] = useState(false);
  const [host, setHost] = useState<LiveStats["host"]>(null);
  // Read by the key handler, which may take several keys from one read (a burst): each key sees
  // what the one before it did, not the state of the last render.
  const confirm = useRef<string | null>(null);
  const modal = useRef<"logs" | "help" | null>(null);
  const rowsRef = useRef<Row[]>([]);
  const selectedRef = useRef<string | undefined>(props.initialSelection);

  const refresh = useCallback(async () => {
    try {
      // Paused sandboxes are listed too (p resumes them), as docker ps lists paused containers.
      const [list, stats] = await Promise.all([client.list({ state: ["creating", "running", "paused"] }), client.stats()]);
      const by = new Map(stats.sandboxes.map((s) => [s.id, s.sample]));
      const next = list.map((info) => ({ info, cpu: by.get(info.id)?.cpu_pct, mem: by.get(info.id)?.mem_used_bytes, memTotal: by.get(info.id)?.mem_total_bytes }));
      rowsRef.current = next;
      setRows(next);
      setHost(stats.host);
    } catch (e) {
      setStatus(`cannot reach the server: ${(e as Error).message}`);
    }
  }, [client]);

  useEffect(() => {
    void refresh();
    const t = setInterval(() => void refresh(), 2000);
    return () => clearInterval(t);
  }, [refresh]);

  useEffect(() => {
    const stop = new AbortController();
    void (async () => {
      try {
        // The newest events first, so the pane is not empty at start.
        for await (const e of client.events({ tail: 8, signal: stop.signal })) {
          if (e.type === "image.progress") continue;
          setEvents((l) => [`${new Date(e.timestamp).toLocaleTimeString()} ${e.type}${e.sandbox_id ? ` ${e.sandbox_id}` : ""}`, ...l].slice(0, 8));
          if (e.type.startsWith("sandbox.")) void refresh();
        }
      } catch {
        // the stream ends when the dashboard does
      }
    })();
    return () => stop.abort();
  }, [client, refresh]);

  const indexOf = (list: Row[], id: string | undefined) =>
    Math.max(
      0,
      list.findIndex((r) => r.info.id === id),
    );
  const select = (id: string | undefined) => {
    selectedRef.current = id;
    setSelectedId(id);
  };
  const selected = indexOf(rows, selectedId);
  const current = rows[selected];
  const act = (label: string, f: () => Promise<string>) => {
    setStatus(`${label}…`);
    f().then(
      (m) => {
        setStatus(m);
        void refresh();
      },
      (e: Error) => setStatus(`${label} failed: ${e.message}`),
    );
  };

  /** One key: what it does, given what the keys before it did. */
  const press = (input: string, key: Parameters<Parameters<typeof useInput>[0]>[1]) => {
    const list = rowsRef.current;
    const cur = list[indexOf(list, selectedRef.current)];
    if (confirm.current) {
      const id = confirm.current;
      confirm.current = null;
      if (input === "y")
        act(`destroying ${id}`, async () => {
          await client.destroy(id);
          return `destroyed ${id}`;
        });
      else setStatus("kept");
      return;
    }
    if (modal.current === "help") {
      modal.current = null;
      setHelp(false);
      return;
    }
    if (modal.current === "logs") {
      if (key.escape || input === "q" || input === "l") {
        modal.current = null;
        setLogs(null);
      }
      return;
    }
    const move = (by: number) => {
      const i = Math.min(list.length - 1, Math.max(0, indexOf(list, selectedRef.current) + by));
      select(list[i]?.info.id);
    };
    if (input === "q" || (key.ctrl && input === "c")) {
      props.done(null);
      exit();
    } else if (key.upArrow || input === "k") move(-1);
    else if (key.downArrow || input === "j") move(1);
    else if (input === "?") {
      modal.current = "help";
      setHelp(true);
    } else if (input === "s") act("spawning", async () => `spawned ${(await client.spawn()).id}`);
    else if (input === "r") void refresh();
    else if (!cur) return;
    else if (key.return || input === "\r") {
      props.done({ shell: cur.info.id });
      exit();
    } else if (input === "l") {
      modal.current = "logs";
      client.logs(cur.info.id, 200).then(setLogs, (e: Error) => {
        modal.current = null;
        setStatus(e.message);
      });
    } else if (input === "f") act(`forking ${cur.info.id}`, async () => `forked into ${(await client.fork(cur.info.id)).sandboxes[0].id}`);
    else if (input === "p" && cur.info.state === "paused") act(`resuming ${cur.info.id}`, async () => `resumed ${(await client.resume(cur.info.id)).id}`);
    else if (input === "p") act(`pausing ${cur.info.id}`, async () => `paused ${(await client.pause(cur.info.id)).id}`);
    else if (input === "d") {
      confirm.current = cur.info.id;
      setStatus(`destroy ${cur.info.id}? y to confirm, any other key to keep it`);
    }
  };

  useInput((input, key) => {
    // Keys typed faster than the screen reads them come as one string: each is a key of its own.
    const plain = !key.upArrow && !key.downArrow && !key.return && !key.escape && !key.ctrl && input.length > 1;
    if (plain) for (const ch of input) press(ch, key);
    else press(input, key);
  });

  const pct = (v: number | null | undefined) => (typeof v === "number" ? `${v.toFixed(1)}%` : "-");
  const cell = (text: string, width: number) => text.slice(0, width - 1).padEnd(width);
  // The image column takes what the terminal has left, so no row wraps (80 columns and up).
  const imageW = Math.max(10, Math.min(28, (stdout.columns || 80) - 14 - 14 - 10 - 8 - 22));
  return h(
    Box,
    { flexDirection: "column" },
    h(
      Box,
      { justifyContent: "space-between" },
      h(Text, { bold: true }, "ForgeVM "),
      h(
        Text,
        { dimColor: true, wrap: "truncate-end" },
        `${props.url} · host CPU ${pct(host?.guest_cpu_pct)} · memory ${bytes(host?.mem_used_bytes)} of ${bytes(host?.mem_total_bytes)}`,
      ),
    ),
    h(Text, { bold: true, wrap: "truncate-end" }, `${cell("SANDBOX", 14)}${cell("NAME", 14)}${cell("STATE", 10)}${cell("IMAGE", imageW)}${cell("CPU", 8)}MEMORY`),
    rows.length === 0
      ? h(Text, { dimColor: true }, "no sandboxes: press s to spawn one")
      : rows.map((r, i) =>
          h(
            Text,
            { key: r.info.id, inverse: i === selected, wrap: "truncate-end" },
            `${cell(r.info.id, 14)}${cell(r.info.name ?? "-", 14)}${cell(r.info.state, 10)}${cell(r.info.image, imageW)}${cell(pct(r.cpu), 8)}${typeof r.mem === "number" ? `${bytes(r.mem)} / ${bytes(r.memTotal)}` : "-"}`,
          ),
        ),
    help
      ? h(Box, { flexDirection: "column", borderStyle: "round", marginTop: 1 }, h(Text, { bold: true }, "KEYS (any key closes this)"), ...HELP.map((l) => h(Text, { key: l }, l)))
      : logs
        ? h(
            Box,
            { flexDirection: "column", borderStyle: "round", marginTop: 1 },
            h(Text, { bold: true }, `console of ${current?.info.id} (l or esc closes)`),
            ...logs.slice(-15).map((l, i) => h(Text, { key: i }, l)),
          )
        : h(
            Box,
            { flexDirection: "column", marginTop: 1 },
            h(Text, { bold: true }, "EVENTS"),
            ...(events.length
              ? events.map((e) => h(Text, { key: e, dimColor: true, wrap: "truncate-end" }, e))
              : [h(Text, { key: "none", dimColor: true }, "events appear here as they happen")]),
          ),
    h(Box, { marginTop: 1 }, h(Text, { color: "cyan" }, status || " ")),
    h(Text, { dimColor: true, wrap: "truncate-end" }, KEYS),
  );
}
