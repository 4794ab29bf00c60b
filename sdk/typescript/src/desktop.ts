// A sandbox's desktop (`sandbox.desktop`), for computer-use agents: screenshots, the mouse, the
// keyboard, windows and the live view, over the REST API's /sandboxes/{id}/desktop routes. The
// sandbox must be made from the desktop image (forgevm/desktop:bookworm); any other answers 409.
import type { Transport } from "./http.js";
import type { DesktopClickOptions, DesktopInfo, DesktopStream, DesktopWindow } from "./types.js";

export interface ScreenshotOptions {
  /** "png" (default) or "jpeg". */
  format?: "png" | "jpeg";
  /** JPEG quality, 1 to 100. */
  quality?: number;
  /** The image's size against the screen's, 0.1 to 1. */
  scale?: number;
  /** Draw the pointer into the image. */
  cursor?: boolean;
  /** Part of the screen only. */
  region?: { x: number; y: number; width: number; height: number };
}

/** Typing and combinations may take a while at a slow desktop; the default request timeout is for one step. */
const INPUT_TIMEOUT_MS = 120_000;

export class Desktop {
  /** @internal use sandbox.desktop */
  constructor(
    private readonly http: Transport,
    private readonly sandboxId: string,
  ) {}

  private path(suffix = ""): string {
    return `/sandboxes/${encodeURIComponent(this.sandboxId)}/desktop${suffix}`;
  }

  private async act(suffix: string, body: unknown, timeoutMs = INPUT_TIMEOUT_MS): Promise<void> {
    await this.http.json("POST", this.path(suffix), { body, sandboxId: this.sandboxId, timeoutMs: Math.max(this.http.timeoutMs, timeoutMs) });
  }

  /** Whether the desktop runs, its screen's size, and its processes. */
  info(): Promise<DesktopInfo> {
    return this.http.json("GET", this.path(), { sandboxId: this.sandboxId });
  }

  /** Starts the display and its session where they do not run. */
  start(): Promise<DesktopInfo> {
    return this.http.json("POST", this.path("/start"), { sandboxId: this.sandboxId, timeoutMs: Math.max(this.http.timeoutMs, 360_000) });
  }

  /** Stops the display, its session and the live view. */
  stop(): Promise<DesktopInfo> {
    return this.http.json("POST", this.path("/stop"), { sandboxId: this.sandboxId, timeoutMs: Math.max(this.http.timeoutMs, 150_000) });
  }

  /** Sets the screen's size (and, when given, its DPI) without a restart; kept for the sandbox's next boot. */
  setScreen(width: number, height: number, dpi?: number): Promise<DesktopInfo> {
    return this.http.json("PUT", this.path("/screen"), { body: { width, height, dpi }, sandboxId: this.sandboxId, timeoutMs: Math.max(this.http.timeoutMs, 90_000) });
  }

  /** The screen's size in pixels. */
  async screenSize(): Promise<{ width: number; height: number }> {
    const i = await this.info();
    if (!i.screen) throw new Error(`sandbox ${this.sandboxId}'s desktop is not running: start it (sandbox.desktop.start())`);
    return i.screen;
  }

  /** A screenshot's bytes: a PNG of the whole screen by default. */
  async screenshot(o: ScreenshotOptions = {}): Promise<Uint8Array> {
    const query: Record<string, string | undefined> = {
      format: o.format,
      quality: o.quality?.toString(),
      scale: o.scale?.toString(),
      cursor: o.cursor === undefined ? undefined : String(o.cursor),
      ...(o.region ? { x: String(o.region.x), y: String(o.region.y), width: String(o.region.width), height: String(o.region.height) } : {}),
    };
    const res = await this.http.send("GET", this.path("/screenshot"), { query, sandboxId: this.sandboxId, timeoutMs: Math.max(this.http.timeoutMs, 60_000) });
    return new Uint8Array(await res.arrayBuffer());
  }

  /** Where the pointer is. */
  cursor(): Promise<{ x: number; y: number }> {
    return this.http.json("GET", this.path("/cursor"), { sandboxId: this.sandboxId });
  }

  moveMouse(x: number, y: number): Promise<void> {
    return this.act("/mouse/move", { x, y });
  }

  /** A left click at (x, y), or where the pointer is; `o` picks the button, the count (2: a double click) and keys held. */
  click(x?: number, y?: number, o: Omit<DesktopClickOptions, "x" | "y"> = {}): Promise<void> {
    return this.act("/mouse/click", { x, y, ...o });
  }

  doubleClick(x?: number, y?: number): Promise<void> {
    return this.click(x, y, { count: 2 });
  }

  rightClick(x?: number, y?: number): Promise<void> {
    return this.click(x, y, { button: "right" });
  }

  /** Presses the button at `from`, moves to `to` and releases it there. */
  drag(from: [number, number], to: [number, number], button: "left" | "middle" | "right" = "left"): Promise<void> {
    return this.act("/mouse/drag", { start_x: from[0], start_y: from[1], end_x: to[0], end_y: to[1], button });
  }

  /** Turns the wheel `amount` clicks, at (x, y) when given. */
  scroll(direction: "up" | "down" | "left" | "right", amount = 1, at?: { x: number; y: number }): Promise<void> {
    return this.act("/mouse/scroll", { direction, amount, ...at });
  }

  /** Types text as key presses (any characters), `delayMs` between keys. */
  type(text: string, delayMs?: number): Promise<void> {
    return this.act("/keyboard/type", { text, delay_ms: delayMs }, 120_000 + text.length * ((delayMs ?? 12) + 20));
  }

  /** Presses a key or a combination: "Return", "ctrl+c", or ["ctrl", "shift", "t"]. */
  press(keys: string | string[]): Promise<void> {
    return this.act("/keyboard/press", { keys });
  }

  /** The visible windows with a name, the one with the focus marked. */
  windows(): Promise<DesktopWindow[]> {
    return this.http.json("GET", this.path("/windows"), { sandboxId: this.sandboxId });
  }

  /** Starts the live view and answers its URL: take over by default, or watch only. */
  stream(o: { viewOnly?: boolean; ttl?: string } = {}): Promise<DesktopStream> {
    return this.http.json("POST", this.path("/stream"), {
      body: { view_only: o.viewOnly, ttl: o.ttl },
      sandboxId: this.sandboxId,
      timeoutMs: Math.max(this.http.timeoutMs, 90_000),
    });
  }

  /** Stops the live view (the desktop keeps running). */
  async stopStream(): Promise<void> {
    await this.http.json("DELETE", this.path("/stream"), { sandboxId: this.sandboxId });
  }
}
