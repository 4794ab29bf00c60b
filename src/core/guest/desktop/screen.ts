// What is on the screen: its size, a screenshot (scrot: the whole screen or a region, PNG or JPEG,
// scaled down, with or without the pointer), and the windows (xdotool). Everything the guest
// prints is parsed as numbers and capped text; a screenshot comes back as base64 in the command's
// output, one round trip.
import { badRequest, conflict, ForgevmError } from "../../../http/errors.js";
import type { Static } from "typebox";
import { type DesktopWindow, SCREEN_LIMITS, SCREEN_SCRIPT } from "../../../schemas/desktop.js";
import { shellQuote } from "../../../util/shell-quote.js";
import { type DesktopGuest, type Point, runOnDesktop } from "./run.js";

export interface Screen {
  width: number;
  height: number;
}

export interface ShotOptions {
  /** Part of the screen; the whole of it when absent. */
  region?: { x: number; y: number; width: number; height: number };
  /** Draw the pointer into the image. */
  cursor?: boolean;
  format?: string;
  /** JPEG quality, 1 to 100. */
  quality?: number;
  /** The image's size against the screen's, 0.1 to 1. */
  scale?: number;
}

export interface Shot {
  data: Buffer;
  format: "png" | "jpeg";
  /** Where the pointer was when it was taken. */
  cursor: { x: number; y: number };
}

/** A visible window: its id, title, place and size, and whether it has the focus (the REST shape, one definition). */
export type WindowInfo = Static<typeof DesktopWindow>;

const MAX_SHOT = 64 * 1024 * 1024;

export async function screen(guest: DesktopGuest): Promise<Screen> {
  const [width, height] = (await runOnDesktop(guest, "xdotool getdisplaygeometry")).trim().split(" ").map(Number);
  if (!(width > 0 && height > 0)) throw new Error("the desktop did not say its screen's size");
  return { width, height };
}

/** The screen script's exit status for a size beyond the X server's framebuffer. */
const TOO_LARGE = 3;
const NO_SCRIPT = 4;

/**
 * Sets the screen's size and, when given, its DPI, without a restart (a mode of the X server's
 * framebuffer; the desktop image's screen script), and keeps them for its next boot.
 */
export async function setScreen(guest: DesktopGuest, o: { width: number; height: number; dpi?: number }): Promise<void> {
  const { width, height, dpi } = o;
  for (const [field, value] of [
    ["width", width],
    ["height", height],
    ["dpi", dpi],
  ] as const) {
    const [min, max] = SCREEN_LIMITS[field];
    if (value === undefined && field === "dpi") continue;
    if (!Number.isInteger(value) || (value as number) < min || (value as number) > max) throw badRequest(`${field} must be an integer from ${min} to ${max}, got ${value}`);
  }
  const body = `[ -x ${SCREEN_SCRIPT} ] || exit ${NO_SCRIPT}
${SCREEN_SCRIPT} ${width} ${height} ${dpi ?? ""} >&2
`;
  await runOnDesktop(guest, body, {
    timeoutMs: 60_000,
    exits: {
      [TOO_LARGE]: () => conflict(`sandbox ${guest.id}'s X server cannot take a ${width}x${height} screen (larger than its framebuffer)`),
      [NO_SCRIPT]: () => conflict(`sandbox ${guest.id}'s desktop image cannot change its screen: rebuild it (sudo forgevm image system desktop)`),
    },
  });
}

export async function screenshot(guest: DesktopGuest, o: ShotOptions = {}): Promise<Shot> {
  const asked = (o.format ?? "png").toLowerCase();
  const format = asked === "jpg" ? "jpeg" : asked;
  if (format !== "png" && format !== "jpeg") throw badRequest(`format must be png or jpeg, got "${String(o.format).slice(0, 20)}"`);
  const args = ["--overwrite", "--silent"];
  if (o.cursor) args.push("--pointer");
  if (o.quality !== undefined) {
    if (!Number.isInteger(o.quality) || o.quality < 1 || o.quality > 100) throw badRequest(`quality must be an integer from 1 to 100, got ${o.quality}`);
    args.push("--quality", String(o.quality));
  }
  let thumb = false;
  if (o.scale !== undefined && o.scale !== 1) {
    if (typeof o.scale !== "number" || !(o.scale >= 0.1 && o.scale <= 1)) throw badRequest(`scale must be a number from 0.1 to 1, got ${o.scale}`);
    args.push("--thumb", String(Math.round(o.scale * 100)));
    thumb = true;
  }
  const points: Point[] = [];
  if (o.region) {
    const { x, y, width, height } = o.region;
    for (const [k, v] of Object.entries({ x, y, width, height })) if (!Number.isInteger(v)) throw badRequest(`${k} must be an integer, got ${v}`);
    if (width < 1 || height < 1) throw badRequest(`width and height must be at least 1, got ${width}x${height}`);
    points.push({ x, y, field: "x, y" }, { x: x + width - 1, y: y + height - 1, field: "x + width - 1, y + height - 1" });
    args.push("--autoselect", `${x},${y},${width},${height}`);
  }
  const ext = format === "png" ? "png" : "jpg";
  // A file named after this shell, so that concurrent screenshots never meet; the pointer parsed by the shell itself.
  const body = `f=/tmp/forgevm-shot-$$
trap 'rm -f "$f.${ext}" "$f-thumb.${ext}"' EXIT
scrot ${args.map(shellQuote).join(" ")} "$f.${ext}" || exit 1
set -- $(xdotool getmouselocation)
echo "\${1#x:} \${2#y:}"
base64 -w0 "$f${thumb ? "-thumb" : ""}.${ext}"
`;
  const out = await runOnDesktop(guest, body, { points, maxOutputBytes: MAX_SHOT });
  const nl = out.indexOf("\n");
  const [x, y] = out.slice(0, nl).trim().split(" ").map(Number);
  const data = Buffer.from(out.slice(nl + 1).trim(), "base64");
  if (data.length === 0) throw new Error("the desktop's screenshot came back empty");
  return { data, format, cursor: { x: Number.isFinite(x) ? x : 0, y: Number.isFinite(y) ? y : 0 } };
}

// xdotool's search (Debian 12 has 3.20160805) dies of a BadWindow error when any window goes away
// while it walks the tree (a tooltip, a menu, a page's popup), printing no window: a list taken once
// would be empty now and then on a busy desktop. A walk that did not end well (killed, or anything
// in its output but window ids: an X error, a display that did not open) is walked again; one that
// ends is the list, empty or not (status 1 and no output: no window has a name). One still failing
// after many tries is a 503, never a wrong list. (The desktop test once got an empty list with no
// BadWindow in it, so every failure is taken again, not that one alone.)
const WINDOWS_CHURN = 90;
const WINDOWS = `active=$(xdotool getactivewindow 2>/dev/null)
n=0
until found=$(xdotool search --onlyvisible --name . 2>&1); [ $? -le 1 ] && [ -z "$(printf '%s' "$found" | tr -d '0-9\\n')" ]; do
  n=$((n + 1))
  [ $n -lt 30 ] || exit \${WINDOWS_CHURN}
done
for w in $found; do
  case $w in *[!0-9]*) continue ;; esac
  g=$(xdotool getwindowgeometry --shell "$w" 2>/dev/null) || continue
  eval "$g"
  t=$(xdotool getwindowname "$w" 2>/dev/null | head -c 1000 | tr '\\t\\n\\r' '   ')
  printf '%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n' "$w" "$X" "$Y" "$WIDTH" "$HEIGHT" "$([ "$w" = "$active" ] && echo 1 || echo 0)" "$t"
done
`;

/** The visible windows with a name, the active one marked. */
export async function windows(guest: DesktopGuest): Promise<WindowInfo[]> {
  const out = await runOnDesktop(guest, WINDOWS, {
    maxOutputBytes: 4 * 1024 * 1024,
    exits: {
      [WINDOWS_CHURN]: () =>
        new ForgevmError("UNAVAILABLE", `sandbox ${guest.id}'s windows kept opening and closing while they were listed (or its display did not answer): try again`),
    },
  });
  const list: WindowInfo[] = [];
  for (const line of out.split("\n")) {
    const f = line.split("\t");
    if (f.length < 7) continue;
    const [id, x, y, width, height] = f.slice(0, 5).map(Number);
    if (![id, x, y, width, height].every(Number.isFinite)) continue;
    list.push({ id, x, y, width, height, active: f[5] === "1", title: f.slice(6).join(" ").trim() });
    if (list.length >= 1000) break;
  }
  return list;
}
