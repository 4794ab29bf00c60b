// The terminal dashboard's screen (ink): running sandboxes with live CPU and memory, the
// server's events as they happen, a sandbox's console log, and the keys that act on the
// selected sandbox. It talks to the server only through the SDK, as the console does over REST.
import { Box, Text, useApp, useInput } from "ink";
import { createElement as h, type ReactNode, useCallback, useEffect, useState } from "react";
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

const KEYS = "↑/↓ select · s spawn · enter shell · l logs · f fork · d destroy · q quit";

export function Dashboard(props: { client: Client; url: string; done: (next: Next) => void; initialSelection?: string }): ReactNode {
  const { client } = props;
  const { exit } = useApp();
  const [rows, setRows] = useState<Row[]>([]);
  const [selected, setSelected] = useState(0);
  const [events, setEvents] = useState<string[]>([]);
  const [status, setStatus] = useState("");
  const [logs, setLogs] = useState<string[] | null>(null);
  const [confirm, setConfirm] = useState<string | null>(null);
  const [host, setHost] = useState<LiveStats["host"]>(null);

  const refresh = useCallback(async () => {
    try {
      const [list, stats] = await Promise.all([client.list(), client.stats()]);
      const by = new Map(stats.sandboxes.map((s) => [s.id, s.sample]));
      setRows(list.map((info) => ({ info, cpu: by.get(info.id)?.cpu_pct, mem: by.get(info.id)?.mem_used_bytes, memTotal: by.get(info.id)?.mem_total_bytes })));
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
        for await (const e of client.events({ signal: stop.signal })) {
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

  useEffect(() => {
    if (!props.initialSelection) return;
    const i = rows.findIndex((r) => r.info.id === props.initialSelection);
    if (i >= 0) setSelected(i);
  }, [rows, props.initialSelection]);

  const current = rows[Math.min(selected, rows.length - 1)];
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

  useInput((input, key) => {
    if (confirm) {
      const id = confirm;
      setConfirm(null);
      if (input === "y")
        act(`destroying ${id}`, async () => {
          await client.destroy(id);
          return `destroyed ${id}`;
        });
      else setStatus("kept");
      return;
    }
    if (logs) {
      if (key.escape || input === "q" || input === "l") setLogs(null);
      return;
    }
    if (input === "q" || (key.ctrl && input === "c")) {
      props.done(null);
      exit();
    } else if (key.upArrow || input === "k") setSelected((i) => Math.max(0, i - 1));
    else if (key.downArrow || input === "j") setSelected((i) => Math.min(rows.length - 1, i + 1));
    else if (input === "s") act("spawning", async () => `spawned ${(await client.spawn()).id}`);
    else if (input === "r") void refresh();
    else if (!current) return;
    else if (key.return) {
      props.done({ shell: current.info.id });
      exit();
    } else if (input === "l") {
      client.logs(current.info.id, 200).then(setLogs, (e: Error) => setStatus(e.message));
    } else if (input === "f") act(`forking ${current.info.id}`, async () => `forked into ${(await client.fork(current.info.id)).sandboxes[0].id}`);
    else if (input === "d") {
      setConfirm(current.info.id);
      setStatus(`destroy ${current.info.id}? y to confirm, any other key to keep it`);
    }
  });

  const pct = (v: number | null | undefined) => (typeof v === "number" ? `${v.toFixed(1)}%` : "-");
  const cell = (text: string, width: number) => text.slice(0, width - 1).padEnd(width);
  return h(
    Box,
    { flexDirection: "column" },
    h(
      Box,
      { justifyContent: "space-between" },
      h(Text, { bold: true }, "ForgeVM "),
      h(Text, { dimColor: true }, `${props.url} · host CPU ${pct(host?.guest_cpu_pct)} · memory ${bytes(host?.mem_used_bytes)} of ${bytes(host?.mem_total_bytes)}`),
    ),
    h(Text, { bold: true }, `${cell("SANDBOX", 14)}${cell("NAME", 16)}${cell("STATE", 10)}${cell("IMAGE", 28)}${cell("CPU", 8)}MEMORY`),
    rows.length === 0
      ? h(Text, { dimColor: true }, "no sandboxes: press s to spawn one")
      : rows.map((r, i) =>
          h(
            Text,
            { key: r.info.id, inverse: i === selected },
            `${cell(r.info.id, 14)}${cell(r.info.name ?? "-", 16)}${cell(r.info.state, 10)}${cell(r.info.image, 28)}${cell(pct(r.cpu), 8)}${typeof r.mem === "number" ? `${bytes(r.mem)} / ${bytes(r.memTotal)}` : "-"}`,
          ),
        ),
    logs
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
          ...(events.length ? events.map((e) => h(Text, { key: e, dimColor: true }, e)) : [h(Text, { key: "none", dimColor: true }, "events appear here as they happen")]),
        ),
    h(Box, { marginTop: 1 }, h(Text, { color: "cyan" }, status || " ")),
    h(Text, { dimColor: true }, KEYS),
  );
}
