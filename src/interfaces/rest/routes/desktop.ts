// A sandbox's desktop over REST (docs/desktop.md): its state, start and stop, the screen (its size
// and DPI set without a restart) and a screenshot (image bytes, as a file download is), the pointer, input, and the windows. Each route
// is one call of core's desktop operations (core/guest/desktop/); the live view is stream.ts's.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { Forge } from "../../../core/forge.js";
import * as desktop from "../../../core/guest/desktop/index.js";
import { badRequest } from "../../../http/errors.js";
import {
  ClickRequest,
  DesktopInfo,
  DesktopWindow,
  DragRequest,
  MoveRequest,
  Pointer,
  PressRequest,
  ScreenRequest,
  ScreenshotQuery,
  ScrollRequest,
  TypeRequest,
} from "../../../schemas/desktop.js";
import { IdParams, Status } from "../../../schemas/rest.js";

const TAGS = ["desktop"];
const Done = Status("done");

/** The desktop's state: its processes, and the screen's size while its display runs. */
async function info(guest: desktop.DesktopGuest) {
  const processes = await desktop.processStates(guest);
  const running = processes.xvfb.running && processes.xfce4.running;
  return { running, screen: processes.xvfb.running ? await desktop.screen(guest).catch(() => null) : null, processes };
}

/** A screenshot query's region: all four of x, y, width and height, or none. */
function region(q: { x?: string; y?: string; width?: string; height?: string }): desktop.ShotOptions["region"] {
  const given = (["x", "y", "width", "height"] as const).filter((k) => q[k] !== undefined);
  if (given.length === 0) return undefined;
  if (given.length < 4) throw badRequest(`a region needs x, y, width and height; got only ${given.join(", ")}`);
  return { x: Number(q.x), y: Number(q.y), width: Number(q.width), height: Number(q.height) };
}

export const desktopRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  const guest = (id: string) => forge.sandboxes.use(id, "rest");

  app.get("/sandboxes/:id/desktop", { schema: { tags: TAGS, params: IdParams, response: { 200: DesktopInfo } } }, async (req) => info(await guest(req.params.id)));

  app.post("/sandboxes/:id/desktop/start", { schema: { tags: TAGS, params: IdParams, response: { 200: DesktopInfo } } }, async (req) => {
    const sb = await guest(req.params.id);
    await desktop.startDesktop(sb);
    return info(sb);
  });

  app.post("/sandboxes/:id/desktop/stop", { schema: { tags: TAGS, params: IdParams, response: { 200: DesktopInfo } } }, async (req) => {
    const sb = await guest(req.params.id);
    await desktop.stopDesktop(sb);
    return info(sb);
  });

  app.put("/sandboxes/:id/desktop/screen", { schema: { tags: TAGS, params: IdParams, body: ScreenRequest, response: { 200: DesktopInfo } } }, async (req) => {
    const sb = await guest(req.params.id);
    await desktop.setScreen(sb, req.body);
    return info(sb);
  });

  app.get(
    "/sandboxes/:id/desktop/screenshot",
    { schema: { tags: TAGS, params: IdParams, querystring: ScreenshotQuery, produces: ["image/png", "image/jpeg"] } },
    async (req, reply) => {
      const q = req.query;
      const shot = await desktop.screenshot(await guest(req.params.id), {
        format: q.format,
        quality: q.quality === undefined ? undefined : Number(q.quality),
        scale: q.scale === undefined ? undefined : Number(q.scale),
        cursor: q.cursor === "true",
        region: region(q),
      });
      reply.header("Content-Type", `image/${shot.format}`).header("X-ForgeVM-Cursor", `${shot.cursor.x},${shot.cursor.y}`);
      return reply.send(shot.data);
    },
  );

  app.get("/sandboxes/:id/desktop/cursor", { schema: { tags: TAGS, params: IdParams, response: { 200: Pointer } } }, async (req) => desktop.cursor(await guest(req.params.id)));

  app.post("/sandboxes/:id/desktop/mouse/move", { schema: { tags: TAGS, params: IdParams, body: MoveRequest, response: { 200: Done } } }, async (req) => {
    await desktop.move(await guest(req.params.id), req.body.x, req.body.y);
    return { status: "done" as const };
  });

  app.post("/sandboxes/:id/desktop/mouse/click", { schema: { tags: TAGS, params: IdParams, body: ClickRequest, response: { 200: Done } } }, async (req) => {
    await desktop.click(await guest(req.params.id), req.body);
    return { status: "done" as const };
  });

  app.post("/sandboxes/:id/desktop/mouse/drag", { schema: { tags: TAGS, params: IdParams, body: DragRequest, response: { 200: Done } } }, async (req) => {
    const b = req.body;
    await desktop.drag(await guest(req.params.id), { startX: b.start_x, startY: b.start_y, endX: b.end_x, endY: b.end_y, button: b.button }, ["start_x, start_y", "end_x, end_y"]);
    return { status: "done" as const };
  });

  app.post("/sandboxes/:id/desktop/mouse/scroll", { schema: { tags: TAGS, params: IdParams, body: ScrollRequest, response: { 200: Done } } }, async (req) => {
    await desktop.scroll(await guest(req.params.id), req.body);
    return { status: "done" as const };
  });

  app.post("/sandboxes/:id/desktop/keyboard/type", { schema: { tags: TAGS, params: IdParams, body: TypeRequest, response: { 200: Done } } }, async (req) => {
    await desktop.type(await guest(req.params.id), req.body.text, req.body.delay_ms);
    return { status: "done" as const };
  });

  app.post("/sandboxes/:id/desktop/keyboard/press", { schema: { tags: TAGS, params: IdParams, body: PressRequest, response: { 200: Done } } }, async (req) => {
    await desktop.press(await guest(req.params.id), req.body.keys, [], "keys");
    return { status: "done" as const };
  });

  app.get("/sandboxes/:id/desktop/windows", { schema: { tags: TAGS, params: IdParams, response: { 200: Type.Array(DesktopWindow) } } }, async (req) =>
    desktop.windows(await guest(req.params.id)),
  );
};
