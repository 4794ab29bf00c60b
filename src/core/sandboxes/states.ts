// A sandbox's states and what each operation needs: one table, so that every interface refuses
// the same operations in the same states with the same words (a 409 that says what state the
// sandbox is in and what to do). Gone sandboxes (destroyed, error) are a 404 instead.
//
//   created ─start─▶ creating ─▶ running ─stop─▶ stopped ─start─▶ running
//                  │  ╰─pause─▶ paused ─resume─▶ running
//                  ╰─ destroy (from any live state) ─▶ destroyed;   failures ─▶ error
import type { SandboxRow, SandboxState } from "../../store/sandboxes.js";
import { conflict, sandboxGone } from "../../http/errors.js";

export type Operation = "exec" | "stop" | "start" | "restart" | "kill" | "pause" | "resume" | "fork" | "snapshot" | "extend" | "destroy";

/** The states each operation may start from. */
export const ALLOWED: Record<Operation, SandboxState[]> = {
  exec: ["running"],
  stop: ["running"],
  start: ["stopped", "created"],
  restart: ["running", "stopped", "created"],
  kill: ["running"],
  pause: ["running"],
  resume: ["paused"],
  fork: ["running"],
  snapshot: ["running"],
  extend: ["creating", "running"],
  destroy: ["created", "creating", "running", "paused", "stopped"],
};

const TO_RUNNING: Partial<Record<SandboxState, string>> = { created: "start it first", creating: "wait until it is running", stopped: "start it first", paused: "resume it first" };

/** Throws unless a sandbox in its state may undergo `op`. */
export function requireState(row: SandboxRow, op: Operation): void {
  if (ALLOWED[op].includes(row.state)) return;
  if (row.state === "destroyed" || row.state === "error") throw sandboxGone(row.id, `sandbox ${row.id} is ${row.state}${row.error ? ` (${row.error.split("\n")[0]})` : ""}`);
  const advice = ALLOWED[op].includes("running") ? TO_RUNNING[row.state] : row.state === "running" ? "it is already running" : undefined;
  throw conflict(`sandbox ${row.id} is ${row.state}: ${op} needs it ${ALLOWED[op].join(" or ")}${advice ? ` (${advice})` : ""}`);
}
