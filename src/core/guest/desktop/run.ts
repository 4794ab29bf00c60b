// How every desktop operation reaches the guest: one command (a shell script) per operation, run
// as root against the display :0, whose prelude checks that the sandbox has a desktop and, for an
// operation that names points, reads the screen's size and checks each point against it. An
// operation without points learns that the display is down only when it fails: the check then
// runs, after the fact, so the common case starts no process for it (under TCG every process a
// guest starts costs tens of milliseconds). The exit status says which check failed; the host
// turns that into a 409 or a 400 that says what to do. Nothing the guest prints is taken as more
// than numbers and text to hand back.
import { badRequest, conflict } from "../../../http/errors.js";
import type { ExecOptions, ExecOutput } from "../guest.js";

/** What a desktop operation needs of a sandbox. */
export interface DesktopGuest {
  readonly id: string;
  exec(command: string | string[], opts?: ExecOptions): Promise<ExecOutput>;
}

/** A point an operation acts on, named as the caller named its fields. */
export interface Point {
  x: number;
  y: number;
  /** The request's fields, for the error: "x, y", "startX, startY". */
  field: string;
}

export const DISPLAY = ":0";
const NO_DESKTOP = 120;
const NO_DISPLAY = 121;
const OFF_SCREEN = 122;

const HAS_DESKTOP = `export DISPLAY=${DISPLAY} PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
command -v xdotool >/dev/null 2>&1 || exit ${NO_DESKTOP}
`;
/** The screen's size as $W and $H (the display must run), and `on X Y I`, which fails the operation for a point off it. */
const GEOMETRY = `set -- $(xdotool getdisplaygeometry 2>/dev/null)
[ $# -eq 2 ] || exit ${NO_DISPLAY}
W=$1 H=$2
on() { [ "$1" -ge 0 ] && [ "$1" -lt "$W" ] && [ "$2" -ge 0 ] && [ "$2" -lt "$H" ] || { echo "$3 $W $H" >&2; exit ${OFF_SCREEN}; }; }
`;

/** `body` in a subshell whose failure is put down to a display that does not run when that is so. */
const checkedAfter = (body: string) => `(
${body}
)
r=$?
[ $r -eq 0 ] || xdotool getdisplaygeometry >/dev/null 2>&1 || exit ${NO_DISPLAY}
exit $r
`;

/** Runs `body` after the prelude (and a check of each point); its stdout, or the error its status means. */
export async function runOnDesktop(
  guest: DesktopGuest,
  body: string,
  o: {
    points?: Point[];
    stdin?: string;
    timeoutMs?: number;
    maxOutputBytes?: number;
    displayOff?: boolean;
    /** The errors the body's own exit statuses mean (below 120: the prelude's are its own). */
    exits?: Record<number, () => Error>;
  } = {},
): Promise<string> {
  const points = o.points ?? [];
  for (const p of points) {
    if (!Number.isInteger(p.x) || !Number.isInteger(p.y)) throw badRequest(`${p.field} must be integers, got (${p.x}, ${p.y})`);
  }
  const checks = points.map((p, i) => `on ${p.x} ${p.y} ${i}\n`).join("");
  // Starting and stopping the desktop work whether or not its display runs.
  const script = o.displayOff ? `${HAS_DESKTOP}${body}` : points.length ? `${HAS_DESKTOP}${GEOMETRY}${checks}${body}` : `${HAS_DESKTOP}${checkedAfter(body)}`;
  const r = await guest.exec(["/bin/sh", "-c", script], {
    stdin: o.stdin,
    timeoutMs: o.timeoutMs ?? 60_000,
    maxOutputBytes: o.maxOutputBytes ?? 1024 * 1024,
  });
  if (r.exitCode === 0) return r.stdout;
  const own = o.exits?.[r.exitCode];
  if (own) throw own();
  if (r.exitCode === NO_DESKTOP)
    throw conflict(`sandbox ${guest.id} has no desktop (xdotool is not installed): spawn the image forgevm/desktop:bookworm, or E2B's template "desktop" (docs/desktop.md)`);
  if (r.exitCode === NO_DISPLAY)
    throw conflict(`sandbox ${guest.id}'s desktop is not running (no X display on ${DISPLAY}): start it (Daytona: computerUse.start(); docs/desktop.md)`);
  if (r.exitCode === OFF_SCREEN) {
    const [i, w, h] = r.stderr.trim().split(/\s+/).map(Number);
    const p = points[i];
    if (p && w > 0 && h > 0) throw badRequest(`${p.field}: (${p.x}, ${p.y}) is off the screen, which is ${w}x${h} (x from 0 to ${w - 1}, y from 0 to ${h - 1})`);
  }
  throw new Error(`the desktop's command failed (exit ${r.exitCode}${r.timedOut ? ", timed out" : ""}): ${r.stderr.trim().slice(0, 300)}`);
}
