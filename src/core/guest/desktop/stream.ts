// The live view a person watches or takes over: noVNC's page and WebSocket, served in the guest by
// websockify in front of an x11vnc on the display. The interactive view is the pair E2B's and
// Daytona's clients start (VNC on 5900, noVNC on 6080). A watch-only view is a second pair whose
// x11vnc runs with -viewonly (5901 behind 6081): the VNC server itself drops a viewer's keys and
// clicks, so what a page in a browser sends cannot reach the desktop whatever it is told.
// Both listen on the guest's loopback only; the host reaches them through the sandbox's agent.
import { DESKTOP_USER, START_VIEW, STOP_VIEW } from "./processes.js";
import { type DesktopGuest, runOnDesktop } from "./run.js";

export type StreamMode = "interactive" | "view";

/** The guest port noVNC serves each view on. */
export const STREAM_PORT: Record<StreamMode, number> = { interactive: 6080, view: 6081 };

const START_WATCH_ONLY = `${DESKTOP_USER}
pgrep -f '^x11vnc .*-rfbport 5901( |$)' >/dev/null || runuser -u "$u" -- setsid -f x11vnc -display :0 -forever -shared -viewonly -wait 50 -rfbport 5901 -nopw -localhost >/tmp/forgevm-x11vnc-view.log 2>&1
pgrep -f '^[^ ]*python3[^ ]* [^ ]*websockify .*6081 ' >/dev/null || runuser -u "$u" -- setsid -f websockify --web /usr/share/novnc 6081 localhost:5901 >/tmp/forgevm-novnc-view.log 2>&1
i=0; until ss -ltn 2>/dev/null | grep -q ':6081 ' || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
`;

/** Starts the view's servers where they do not run; its display must be running (a 409 says to start it otherwise). */
export async function startStream(guest: DesktopGuest, mode: StreamMode): Promise<void> {
  await runOnDesktop(guest, mode === "view" ? START_WATCH_ONLY : START_VIEW, { timeoutMs: 60_000 });
}

/** Stops every view's servers (the desktop keeps running). */
export async function stopStream(guest: DesktopGuest): Promise<void> {
  await runOnDesktop(guest, STOP_VIEW, { displayOff: true });
}
