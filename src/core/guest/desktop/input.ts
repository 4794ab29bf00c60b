// The mouse and the keyboard, with xdotool: each operation one command, its points checked
// against the screen first (run.ts). Buttons and keys are checked on the host (keys.ts).
import { badRequest } from "../../../http/errors.js";
import { combination } from "./keys.js";
import { type DesktopGuest, type Point, runOnDesktop } from "./run.js";

export type Button = "left" | "middle" | "right";
export type ScrollDirection = "up" | "down" | "left" | "right";

const BUTTONS: Record<Button, number> = { left: 1, middle: 2, right: 3 };
const WHEEL: Record<ScrollDirection, number> = { up: 4, down: 5, left: 6, right: 7 };

function button(b: string | undefined, field = "button"): number {
  const n = BUTTONS[(b ?? "left").toLowerCase() as Button];
  if (!n) throw badRequest(`${field} must be left, middle or right, got "${String(b).slice(0, 20)}"`);
  return n;
}

/** The point a click or a scroll names, or null for where the pointer is (one of x and y alone is a 400, by the point check). */
function pointOrPointer(o: { x?: number; y?: number }): Point | null {
  return o.x === undefined && o.y === undefined ? null : { x: o.x ?? Number.NaN, y: o.y ?? Number.NaN, field: "x, y" };
}

/** The command that moves the pointer to `at` first, if there is one. */
const moveTo = (at: Point | null) => (at ? `xdotool mousemove --sync ${at.x} ${at.y} && ` : "");

/** Where the pointer is. */
export async function cursor(guest: DesktopGuest): Promise<{ x: number; y: number }> {
  const out = await runOnDesktop(guest, "xdotool getmouselocation --shell");
  const x = Number(/^X=(\d+)$/m.exec(out)?.[1]);
  const y = Number(/^Y=(\d+)$/m.exec(out)?.[1]);
  if (!Number.isFinite(x) || !Number.isFinite(y)) throw new Error("the desktop did not say where the pointer is");
  return { x, y };
}

export async function move(guest: DesktopGuest, x: number, y: number): Promise<void> {
  await runOnDesktop(guest, `xdotool mousemove --sync ${x} ${y}`, { points: [{ x, y, field: "x, y" }] });
}

/** A click at (x, y), or where the pointer is when neither is given; `count` clicks (a double click is 2), `modifiers` held. */
export async function click(guest: DesktopGuest, o: { x?: number; y?: number; button?: string; double?: boolean; count?: number; modifiers?: string[] }): Promise<void> {
  const b = button(o.button);
  const count = o.count ?? (o.double ? 2 : 1);
  if (!Number.isInteger(count) || count < 1 || count > 3) throw badRequest(`count must be 1, 2 or 3 clicks, got ${count}`);
  const at = pointOrPointer(o);
  await runOnDesktop(guest, `${moveTo(at)}${holding(o.modifiers, `xdotool click --repeat ${count} ${b}`)}`, { points: at ? [at] : [] });
}

/** `command` with these keys held down (released whatever it does). */
function holding(modifiers: string[] | undefined, command: string): string {
  if (!modifiers?.length) return command;
  const keys = combination(modifiers, "modifiers");
  return `xdotool keydown ${keys} && ${command}; r=$?; xdotool keyup ${keys}; exit $r`;
}

/** Presses (`down`) or releases a button, at (x, y) or where the pointer is: a drag a client makes step by step. */
export async function pressButton(guest: DesktopGuest, o: { x?: number; y?: number; button?: string; down: boolean }): Promise<void> {
  const b = button(o.button);
  const at = pointOrPointer(o);
  await runOnDesktop(guest, `${moveTo(at)}xdotool ${o.down ? "mousedown" : "mouseup"} ${b}`, { points: at ? [at] : [] });
}

/** Presses a button at one point, moves to another and releases it there; `fields` names the two points for errors as the caller's request does. */
export async function drag(
  guest: DesktopGuest,
  o: { startX: number; startY: number; endX: number; endY: number; button?: string },
  fields: [start: string, end: string] = ["startX, startY", "endX, endY"],
): Promise<void> {
  const b = button(o.button);
  await runOnDesktop(guest, `xdotool mousemove --sync ${o.startX} ${o.startY} mousedown ${b} && xdotool mousemove --sync ${o.endX} ${o.endY} && xdotool mouseup ${b}`, {
    points: [
      { x: o.startX, y: o.startY, field: fields[0] },
      { x: o.endX, y: o.endY, field: fields[1] },
    ],
  });
}

export async function scroll(guest: DesktopGuest, o: { x?: number; y?: number; direction: string; amount?: number; modifiers?: string[] }): Promise<void> {
  const wheel = WHEEL[String(o.direction).toLowerCase() as ScrollDirection];
  if (!wheel) throw badRequest(`direction must be up, down, left or right, got "${String(o.direction).slice(0, 20)}"`);
  const amount = o.amount ?? 1;
  if (!Number.isInteger(amount) || amount < 1 || amount > 100) throw badRequest(`amount must be an integer from 1 to 100, got ${amount}`);
  const at = pointOrPointer(o);
  await runOnDesktop(guest, `${moveTo(at)}${holding(o.modifiers, `xdotool click --repeat ${amount} ${wheel}`)}`, { points: at ? [at] : [] });
}

/** Types text as key presses (from stdin: any character, nothing for a shell to read), `delayMs` between keys. */
export async function type(guest: DesktopGuest, text: string, delayMs = 12): Promise<void> {
  if (typeof text !== "string") throw badRequest("text must be a string");
  if (text.length > 100_000) throw badRequest(`text must be at most 100000 characters, got ${text.length}`);
  if (!Number.isInteger(delayMs) || delayMs < 0 || delayMs > 10_000) throw badRequest(`delay must be an integer from 0 to 10000 ms, got ${delayMs}`);
  if (text === "") return;
  // At most a minute of typing per 5,000 characters at the default delay, and never under a minute.
  const timeoutMs = 60_000 + text.length * (delayMs + 20);
  await runOnDesktop(guest, `xdotool type --delay ${delayMs} --file -`, { stdin: text, timeoutMs });
}

/** Presses and releases a key or a combination ("ctrl+c", or its keys as a list; `modifiers` held with `key`). */
export async function press(guest: DesktopGuest, keys: string | string[], modifiers: string[] = [], field = "key"): Promise<void> {
  if (!Array.isArray(modifiers)) throw badRequest("modifiers must be a list of key names");
  const combo = [...modifiers.map((m) => combination(m, "modifiers")), combination(keys, field)].join("+");
  await runOnDesktop(guest, `xdotool key --clearmodifiers ${combo}`);
}

/** Presses combinations one after the other ("ctrl+a", "Delete"), all checked before the first is pressed. */
export async function pressEach(guest: DesktopGuest, combos: string[], field = "keys"): Promise<void> {
  if (combos.length === 0 || combos.length > 32) throw badRequest(`${field} must name 1 to 32 keys or combinations`);
  await runOnDesktop(guest, `xdotool key --clearmodifiers ${combos.map((c) => combination(c, field)).join(" ")}`);
}
