// The REST shapes of a sandbox's desktop (docs/desktop.md): its state, the screen, the pointer,
// input, windows and the live view; and the screen's bounds and the image's screen script, which
// the image's build (setup/desktop-image.ts) and core's operations share. Coordinates are the
// screen's pixels from its top left corner; a point off the screen is refused with its size.
import { Type } from "typebox";
import { Body } from "./fields.js";

/** The screen a desktop boots with when its spawn does not say: E2B's desktop SDK's defaults. */
export const DEFAULT_SCREEN = { width: 1024, height: 768, dpi: 96 };
/**
 * The largest screen a desktop takes: its X server's framebuffer, allocated when it starts, within
 * which a screen size is a mode switched to (RandR) without a restart. Only the part in use is
 * drawn, so the larger framebuffer costs a sandbox almost nothing.
 */
export const MAX_SCREEN = { width: 2560, height: 1600 };
/** What a screen may be set to, inclusive: every interface's check and the REST schema's. */
export const SCREEN_LIMITS = { width: [320, MAX_SCREEN.width], height: [240, MAX_SCREEN.height], dpi: [48, 480] } as const;
/** The desktop image's script that sets the running screen: `screen WIDTH HEIGHT [DPI]`. */
export const SCREEN_SCRIPT = "/usr/local/lib/forgevm-desktop/screen";

export const ScreenRequest = Body(
  {
    width: Type.Integer({ minimum: SCREEN_LIMITS.width[0], maximum: SCREEN_LIMITS.width[1], description: "pixels" }),
    height: Type.Integer({ minimum: SCREEN_LIMITS.height[0], maximum: SCREEN_LIMITS.height[1], description: "pixels" }),
    dpi: Type.Optional(
      Type.Integer({ minimum: SCREEN_LIMITS.dpi[0], maximum: SCREEN_LIMITS.dpi[1], description: "what applications scale text and icons by (default: as it is; 96 at first)" }),
    ),
  },
  { $id: "DesktopScreen", description: "A desktop's screen: its size and DPI" },
);

const Coordinate = (description: string) => Type.Integer({ minimum: -1_000_000, maximum: 1_000_000, description });
const Button = Type.Union([Type.Literal("left"), Type.Literal("middle"), Type.Literal("right")], { description: "default left" });
const KeyList = Type.Array(Type.String({ minLength: 1, maxLength: 40 }), { minItems: 1, maxItems: 8 });

export const DesktopProcessState = Type.Object({ running: Type.Boolean(), pid: Type.Optional(Type.Integer()) }, { $id: "DesktopProcessState" });

export const DesktopInfo = Type.Object(
  {
    running: Type.Boolean({ description: "its display and session run" }),
    screen: Type.Union([Type.Object({ width: Type.Integer(), height: Type.Integer() }), Type.Null()], { description: "null while it is stopped" }),
    processes: Type.Record(Type.String(), DesktopProcessState, { description: "xvfb, xfce4, x11vnc, novnc" }),
  },
  { $id: "DesktopInfo" },
);

export const Pointer = Type.Object({ x: Type.Integer(), y: Type.Integer() }, { $id: "Pointer" });

export const MoveRequest = Body({ x: Coordinate("to"), y: Coordinate("to") }, { $id: "DesktopMoveRequest" });

export const ClickRequest = Body(
  {
    x: Type.Optional(Coordinate("where; both or neither of x and y (neither: where the pointer is)")),
    y: Type.Optional(Coordinate("where")),
    button: Type.Optional(Button),
    count: Type.Optional(Type.Integer({ minimum: 1, maximum: 3, description: "1 (default), 2 for a double click, 3 for a triple" })),
    modifiers: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 40 }), { maxItems: 4, description: 'keys held while it clicks: ["shift"]' })),
  },
  { $id: "DesktopClickRequest" },
);

export const DragRequest = Body(
  {
    start_x: Coordinate("where the button goes down"),
    start_y: Coordinate("where the button goes down"),
    end_x: Coordinate("where it comes up"),
    end_y: Coordinate("where it comes up"),
    button: Type.Optional(Button),
  },
  { $id: "DesktopDragRequest" },
);

export const ScrollRequest = Body(
  {
    x: Type.Optional(Coordinate("where; both or neither of x and y")),
    y: Type.Optional(Coordinate("where")),
    direction: Type.Union([Type.Literal("up"), Type.Literal("down"), Type.Literal("left"), Type.Literal("right")]),
    amount: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, description: "wheel clicks, default 1" })),
  },
  { $id: "DesktopScrollRequest" },
);

export const TypeRequest = Body(
  {
    text: Type.String({ maxLength: 100_000, description: "typed as key presses, any characters" }),
    delay_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: 10_000, description: "between keys, default 12" })),
  },
  { $id: "DesktopTypeRequest" },
);

export const PressRequest = Body(
  {
    keys: Type.Union([Type.String({ minLength: 1, maxLength: 200 }), KeyList], {
      description: 'a key or a combination: "Return", "ctrl+c", or ["ctrl", "shift", "t"] (names: docs/desktop.md)',
    }),
  },
  { $id: "DesktopPressRequest" },
);

export const DesktopWindow = Type.Object(
  {
    id: Type.Integer(),
    title: Type.String(),
    x: Type.Integer(),
    y: Type.Integer(),
    width: Type.Integer(),
    height: Type.Integer(),
    active: Type.Boolean({ description: "it has the focus" }),
  },
  { $id: "DesktopWindow" },
);

/** A query's values are strings: numbers and flags are checked as text, then read. */
const IntText = Type.String({ pattern: "^-?[0-9]{1,7}$" });
export const ScreenshotQuery = Type.Object(
  {
    format: Type.Optional(Type.Union([Type.Literal("png"), Type.Literal("jpeg"), Type.Literal("jpg")], { description: "default png" })),
    quality: Type.Optional(Type.String({ pattern: "^[0-9]{1,3}$", description: "JPEG quality, 1 to 100" })),
    scale: Type.Optional(Type.String({ pattern: "^[0-9]{0,1}(\\.[0-9]{1,6})?$", description: "the image's size against the screen's, 0.1 to 1" })),
    cursor: Type.Optional(Type.Union([Type.Literal("true"), Type.Literal("false")], { description: "draw the pointer" })),
    x: Type.Optional(IntText),
    y: Type.Optional(IntText),
    width: Type.Optional(IntText),
    height: Type.Optional(IntText),
  },
  { additionalProperties: false },
);

export const StreamRequest = Body(
  {
    view_only: Type.Optional(Type.Boolean({ description: "watch only: the VNC server drops a viewer's keys and clicks (default false: take over)" })),
    ttl: Type.Optional(Type.String({ description: 'how long the URL works, e.g. "1h" (default 1h, at most 24h); a page already open stays open' })),
  },
  { $id: "DesktopStreamRequest" },
);

export const StreamInfo = Type.Object(
  {
    url: Type.String({ description: "noVNC's page, served through this server; it works on its own in a browser until it expires" }),
    view_only: Type.Boolean(),
    expires_at: Type.String(),
  },
  { $id: "DesktopStream" },
);
