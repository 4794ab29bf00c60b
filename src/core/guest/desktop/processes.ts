// The desktop's processes as a client manages them (Daytona's computer-use API names four: the X
// server, the XFCE session, the VNC server and noVNC): which run, starting and stopping them all,
// restarting one, and its log. The X server and the session are the image's desktop service
// (desktop-image.ts); the VNC server and noVNC are started here as E2B's desktop SDK starts its
// live view, on the same ports (5900, and 6080 for noVNC's page and WebSocket).
import { notFound } from "../../../http/errors.js";
import { type DesktopGuest, runOnDesktop } from "./run.js";

export const DESKTOP_PROCESSES = ["xvfb", "xfce4", "x11vnc", "novnc"] as const;
export type DesktopProcess = (typeof DESKTOP_PROCESSES)[number];

/**
 * How each is found (pgrep's arguments) and where it logs. noVNC's server is a Python program found
 * by its command line, which must start with the interpreter: the script that starts it holds its
 * name too.
 */
const FIND: Record<DesktopProcess, { pgrep: string; log: string }> = {
  xvfb: { pgrep: "-x Xvfb.real", log: "/tmp/xvfb.log" },
  xfce4: { pgrep: "-x xfce4-session", log: "/tmp/xfce4.log" },
  // The interactive view's pair, by port: a watch-only pair may run beside it (stream.ts).
  x11vnc: { pgrep: "-f '^x11vnc .*-rfbport 5900( |$)'", log: "/tmp/forgevm-x11vnc.log" },
  novnc: { pgrep: "-f '^[^ ]*python3[^ ]* [^ ]*websockify .*6080 '", log: "/tmp/forgevm-novnc.log" },
};

export interface ProcessState {
  running: boolean;
  pid?: number;
}

/** Sets $u to the display's owner, whom the VNC servers run as. */
export const DESKTOP_USER = `u=$(ps -o user= -p "$(pgrep -x Xvfb.real | head -n1)" 2>/dev/null | tr -d ' '); [ -n "$u" ] || u=root`;
/** Starts the interactive live view (VNC on 5900, noVNC on 6080) where it does not run, and waits for noVNC to listen. */
export const START_VIEW = `${DESKTOP_USER}
pgrep ${FIND.x11vnc.pgrep} >/dev/null || runuser -u "$u" -- setsid -f x11vnc -display :0 -forever -shared -wait 50 -rfbport 5900 -nopw -localhost >${FIND.x11vnc.log} 2>&1
pgrep ${FIND.novnc.pgrep} >/dev/null || runuser -u "$u" -- setsid -f websockify --web /usr/share/novnc 6080 localhost:5900 >${FIND.novnc.log} 2>&1
i=0; until ss -ltn 2>/dev/null | grep -q ':6080 ' || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
`;
/**
 * Stops every live view, the interactive one and a watch-only one beside it, and waits until they
 * are gone: an x11vnc can take seconds to act on its TERM while its display is busy, so whatever
 * is left after 3 s is killed.
 */
export const STOP_VIEW = `end() { pkill "$@"; i=0; while pgrep "$@" >/dev/null; do i=$((i + 1)); [ $i -lt 30 ] || { pkill -KILL "$@"; break; }; sleep 0.1; done; }
end -f '^[^ ]*python3[^ ]* [^ ]*websockify'; end -x x11vnc; true
`;

function known(name: string): DesktopProcess {
  if (!(DESKTOP_PROCESSES as readonly string[]).includes(name))
    throw notFound(`the desktop has no process "${name.slice(0, 40)}"; its processes are ${DESKTOP_PROCESSES.join(", ")}`);
  return name as DesktopProcess;
}

/** Each process's state. */
export async function processStates(guest: DesktopGuest): Promise<Record<DesktopProcess, ProcessState>> {
  const body = DESKTOP_PROCESSES.map((p) => `echo "${p} $(pgrep -o ${FIND[p].pgrep})"`).join("\n");
  const out = await runOnDesktop(guest, body, { displayOff: true });
  const states = Object.fromEntries(DESKTOP_PROCESSES.map((p) => [p, { running: false }])) as Record<DesktopProcess, ProcessState>;
  for (const line of out.split("\n")) {
    const [name, pid] = line.trim().split(" ");
    if ((DESKTOP_PROCESSES as readonly string[]).includes(name) && /^\d+$/.test(pid ?? "")) states[name as DesktopProcess] = { running: true, pid: Number(pid) };
  }
  return states;
}

/**
 * Starts what is not running: the display and its session (the image's service, restarted, since
 * it counts as started after its start script even when what it started has gone since), then the
 * live view's servers.
 */
export async function startDesktop(guest: DesktopGuest): Promise<void> {
  await runOnDesktop(guest, `pgrep ${FIND.xfce4.pgrep} >/dev/null || systemctl restart forgevm-desktop.service || exit 1\n${START_VIEW}`, { displayOff: true, timeoutMs: 330_000 });
}

/** Stops them all: the live view's servers, then the display with its session. */
export async function stopDesktop(guest: DesktopGuest): Promise<void> {
  await runOnDesktop(guest, `${STOP_VIEW}systemctl stop forgevm-desktop.service; pkill ${FIND.xfce4.pgrep}; pkill ${FIND.xvfb.pgrep}; true`, {
    displayOff: true,
    timeoutMs: 120_000,
  });
}

/** Restarts one: the display or the session restarts the desktop service (the live view follows it). */
export async function restartProcess(guest: DesktopGuest, name: string): Promise<void> {
  const p = known(name);
  const body =
    p === "xvfb" || p === "xfce4" ? `${STOP_VIEW}systemctl restart forgevm-desktop.service || exit 1\n${START_VIEW}` : `pkill ${FIND[p].pgrep}; sleep 0.5\n${START_VIEW}`;
  await runOnDesktop(guest, body, { displayOff: true, timeoutMs: 330_000 });
}

/** One process's log (its output and its errors, in one file), at most its last 256 KiB. */
export async function processLog(guest: DesktopGuest, name: string): Promise<string> {
  const p = known(name);
  return runOnDesktop(guest, `tail -c 262144 ${FIND[p].log} 2>/dev/null; true`, { displayOff: true });
}

export function processState(states: Record<DesktopProcess, ProcessState>, name: string): ProcessState {
  return states[known(name)];
}
