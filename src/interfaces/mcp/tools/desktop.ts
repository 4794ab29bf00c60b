// A desktop for a computer-use agent, in the shape the major computer-use tool definitions share:
// one `computer` tool taking an action, a coordinate ([x, y]) and text, which answers with a
// screenshot as an image content block (after the action, unless told not to), as a model that
// looks at the screen and moves the mouse expects. `text` is the typed text for "type", the key or
// keys for "key" ("ctrl+s", "ctrl+a Delete": xdotool's names, space between presses), and keys held
// for a click or a scroll. Every action is one call of core's desktop operations.
import { Type } from "typebox";
import * as desktop from "../../../core/guest/desktop/index.js";
import { badRequest } from "../../../http/errors.js";
import { tool } from "../tool.js";
import { SandboxId } from "./common.js";

const ACTIONS = [
  "screenshot",
  "cursor_position",
  "mouse_move",
  "left_click",
  "right_click",
  "middle_click",
  "double_click",
  "triple_click",
  "left_click_drag",
  "left_mouse_down",
  "left_mouse_up",
  "scroll",
  "type",
  "key",
  "wait",
] as const;
type Action = (typeof ACTIONS)[number];

const Coordinate = Type.Tuple([Type.Integer({ minimum: -100000, maximum: 100000 }), Type.Integer({ minimum: -100000, maximum: 100000 })], {
  description: "[x, y] in the screen's pixels from its top left corner",
});

const CLICKS: Partial<Record<Action, { button: string; count: number }>> = {
  left_click: { button: "left", count: 1 },
  right_click: { button: "right", count: 1 },
  middle_click: { button: "middle", count: 1 },
  double_click: { button: "left", count: 2 },
  triple_click: { button: "left", count: 3 },
};

/** The point an action names, or none (where the pointer is). */
const at = (c: [number, number] | undefined) => (c ? { x: c[0], y: c[1] } : {});

function need<T>(v: T | undefined, field: string, action: string): T {
  if (v === undefined) throw badRequest(`computer: ${action} needs ${field}`);
  return v;
}

/** Held keys as `text` names them for a click or a scroll: "shift", "ctrl+shift". */
const held = (text: string | undefined) => (text ? text.split("+").map((k) => k.trim()) : undefined);

export const computer = tool({
  name: "computer",
  title: "Use a sandbox's desktop",
  description: "Look at and drive a desktop sandbox (image forgevm/desktop:bookworm): screenshot, click, drag, scroll, type, keys; answers with the screen after.",
  input: Type.Object(
    {
      sandbox_id: SandboxId,
      action: Type.Union(
        ACTIONS.map((a) => Type.Literal(a)),
        { description: ACTIONS.join(", ") },
      ),
      coordinate: Type.Optional(Coordinate),
      start_coordinate: Type.Optional(Type.Tuple([Type.Integer(), Type.Integer()], { description: "where left_click_drag presses the button; coordinate is where it lets go" })),
      text: Type.Optional(
        Type.String({
          maxLength: 100000,
          description: 'the text for "type"; the key or keys for "key" ("Return", "ctrl+s", "ctrl+a Delete"); keys held for a click or a scroll ("shift")',
        }),
      ),
      scroll_direction: Type.Optional(Type.Union([Type.Literal("up"), Type.Literal("down"), Type.Literal("left"), Type.Literal("right")])),
      scroll_amount: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, description: "wheel clicks (default 3)" })),
      duration: Type.Optional(Type.Number({ minimum: 0, maximum: 60, description: "seconds, for wait" })),
      screenshot: Type.Optional(Type.Boolean({ description: "answer with a screenshot after the action (default true)" })),
    },
    { additionalProperties: false },
  ),
  output: Type.Object({
    action: Type.String(),
    cursor: Type.Optional(Type.Object({ x: Type.Integer(), y: Type.Integer() }, { description: "where the pointer is, after the action" })),
    screen: Type.Optional(Type.Object({ width: Type.Integer(), height: Type.Integer() })),
  }),
  bulky: ["text"],
  async run(ctx, a) {
    ctx.agents.row(a.sandbox_id);
    const sb = await ctx.forge.sandboxes.use(a.sandbox_id, "mcp");
    const click = CLICKS[a.action as Action];
    if (click) await desktop.click(sb, { ...at(a.coordinate), ...click, modifiers: held(a.text) });
    else if (a.action === "mouse_move") {
      const [x, y] = need(a.coordinate, "coordinate", a.action);
      await desktop.move(sb, x, y);
    } else if (a.action === "left_click_drag") {
      const [sx, sy] = need(a.start_coordinate, "start_coordinate", a.action);
      const [ex, ey] = need(a.coordinate, "coordinate", a.action);
      await desktop.drag(sb, { startX: sx, startY: sy, endX: ex, endY: ey }, ["start_coordinate", "coordinate"]);
    } else if (a.action === "left_mouse_down" || a.action === "left_mouse_up") await desktop.pressButton(sb, { ...at(a.coordinate), down: a.action === "left_mouse_down" });
    else if (a.action === "scroll") {
      const direction = need(a.scroll_direction, "scroll_direction", a.action);
      await desktop.scroll(sb, { ...at(a.coordinate), direction, amount: a.scroll_amount ?? 3, modifiers: held(a.text) });
    } else if (a.action === "type") await desktop.type(sb, need(a.text, "text", a.action));
    else if (a.action === "key") await desktop.pressEach(sb, need(a.text, "text", a.action).trim().split(/\s+/), "text");
    else if (a.action === "wait") await new Promise((r) => setTimeout(r, (a.duration ?? 1) * 1000));

    if (a.action === "cursor_position") {
      const cursor = await desktop.cursor(sb);
      return { result: { action: a.action, cursor }, text: `The pointer is at (${cursor.x}, ${cursor.y}).`, sandboxId: sb.id };
    }
    if (a.screenshot === false && a.action !== "screenshot") return { result: { action: a.action }, text: `${a.action}: done.`, sandboxId: sb.id };
    const shot = await desktop.screenshot(sb, { cursor: true });
    const size = pngSize(shot.data);
    return {
      result: { action: a.action, cursor: shot.cursor, ...(size ? { screen: size } : {}) },
      text: `${a.action === "screenshot" ? "The screen" : `${a.action}: done. The screen now`}${size ? ` (${size.width}x${size.height})` : ""}; the pointer is at (${shot.cursor.x}, ${shot.cursor.y}).`,
      extra: [{ type: "image", data: shot.data.toString("base64"), mimeType: "image/png" }],
      sandboxId: sb.id,
    };
  },
});

/** A PNG's width and height, from its header. */
function pngSize(b: Buffer): { width: number; height: number } | null {
  return b.length > 24 && b.toString("latin1", 12, 16) === "IHDR" ? { width: b.readUInt32BE(16), height: b.readUInt32BE(20) } : null;
}
