// Daytona's computer-use API (`sandbox.computerUse` in its SDK): the desktop's processes, the
// mouse, the keyboard, screenshots (whole, a region, compressed) and the display's windows, each
// route one call of core's desktop operations (core/guest/desktop/). A sandbox without the
// desktop image answers 409, a point off the screen or an unknown key 400, as everywhere else.
// Screen recordings are Ogg Theora files (core/guest/desktop/recordings.ts says why); the
// accessibility tree is not served yet: it answers 400 and says so.
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type, type Static } from "typebox";
import type { Forge } from "../../../core/forge.js";
import * as desktop from "../../../core/guest/desktop/index.js";
import { badRequest, conflict } from "../../../http/errors.js";
import { toolboxOf } from "./context.js";

const Int = Type.Integer({ minimum: -1_000_000, maximum: 1_000_000 });
const XY = Type.Object({ x: Int, y: Int }, { additionalProperties: true });
const Click = Type.Object(
  { x: Type.Optional(Int), y: Type.Optional(Int), button: Type.Optional(Type.String()), double: Type.Optional(Type.Boolean()) },
  { additionalProperties: true },
);
const Drag = Type.Object({ startX: Int, startY: Int, endX: Int, endY: Int, button: Type.Optional(Type.String()) }, { additionalProperties: true });
const Scroll = Type.Object({ x: Type.Optional(Int), y: Type.Optional(Int), direction: Type.String(), amount: Type.Optional(Type.Integer()) }, { additionalProperties: true });
const TypeText = Type.Object({ text: Type.String(), delay: Type.Optional(Type.Integer()) }, { additionalProperties: true });
const Key = Type.Object({ key: Type.String(), modifiers: Type.Optional(Type.Array(Type.String(), { maxItems: 8 })) }, { additionalProperties: true });
const Hotkey = Type.Object({ keys: Type.String() }, { additionalProperties: true });
// A query's values are strings: numbers and flags are checked as text, then read.
const IntText = Type.String({ pattern: "^-?[0-9]{1,7}$" });
const ShotQuery = Type.Object(
  {
    showCursor: Type.Optional(Type.String({ enum: ["true", "false"] })),
    format: Type.Optional(Type.String({ maxLength: 10 })),
    quality: Type.Optional(IntText),
    scale: Type.Optional(Type.String({ pattern: "^[0-9]{0,3}(\\.[0-9]{1,6})?$" })),
    x: Type.Optional(IntText),
    y: Type.Optional(IntText),
    width: Type.Optional(IntText),
    height: Type.Optional(IntText),
  },
  { additionalProperties: true },
);
const Name = Type.Object({ sandboxId: Type.String(), processName: Type.String() });
const RecordingId = Type.Object({ sandboxId: Type.String(), id: Type.String({ maxLength: 64 }) });
const StartRecording = Type.Object({ label: Type.Optional(Type.String({ maxLength: 100 })) }, { additionalProperties: true });
const StopRecording = Type.Object({ id: Type.String({ maxLength: 64 }) }, { additionalProperties: true });

/** A recording as Daytona's SDK reads it. */
function recordingView(r: desktop.Recording) {
  return {
    id: r.id,
    fileName: r.file.slice(r.file.lastIndexOf("/") + 1),
    filePath: r.file,
    startTime: r.startedAt.toISOString(),
    ...(r.endedAt ? { endTime: r.endedAt.toISOString(), durationSeconds: (r.endedAt.getTime() - r.startedAt.getTime()) / 1000 } : {}),
    status: r.status,
    sizeBytes: r.sizeBytes,
  };
}

type Q = Static<typeof ShotQuery>;

/** Daytona's view of a process: its state, with the daemon's priority and restart fields. */
const PRIORITY: Record<string, number> = { xvfb: 100, xfce4: 200, x11vnc: 300, novnc: 400 };
function statusMap(states: Record<string, desktop.ProcessState>) {
  return Object.fromEntries(
    Object.entries(states).map(([name, s]) => [name, { running: s.running, ...(s.pid ? { pid: s.pid } : {}), priority: PRIORITY[name], autoRestart: false }]),
  );
}

const num = (v: string | undefined) => (v === undefined ? undefined : Number(v));

function region(q: Q): desktop.ShotOptions["region"] {
  const missing = (["x", "y", "width", "height"] as const).filter((k) => q[k] === undefined);
  if (missing.length) throw badRequest(`a region's screenshot needs x, y, width and height; missing ${missing.join(", ")}`);
  return { x: Number(q.x), y: Number(q.y), width: Number(q.width), height: Number(q.height) };
}

const compressed = (q: Q): desktop.ShotOptions => ({ format: q.format, quality: num(q.quality), scale: num(q.scale) });

async function shot(forge: Forge, req: FastifyRequest<{ Querystring: Q }>, o: desktop.ShotOptions) {
  const t = await toolboxOf(forge, req);
  const s = await desktop.screenshot(t.sandbox, { ...o, cursor: req.query.showCursor === "true" });
  return { screenshot: s.data.toString("base64"), cursorPosition: s.cursor, sizeBytes: s.data.length };
}

export async function computerUseRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  const h = { hide: true };
  app.post("/computeruse/start", { schema: h }, async (req) => {
    const t = await toolboxOf(forge, req);
    await desktop.startDesktop(t.sandbox);
    return { message: "Computer use processes started successfully", status: statusMap(await desktop.processStates(t.sandbox)) };
  });
  app.post("/computeruse/stop", { schema: h }, async (req) => {
    const t = await toolboxOf(forge, req);
    await desktop.stopDesktop(t.sandbox);
    return { message: "Computer use processes stopped successfully", status: statusMap(await desktop.processStates(t.sandbox)) };
  });
  // The SDK's getStatus() asks the first, its system status the second: both are the four processes' sum.
  for (const path of ["/computeruse/process-status", "/computeruse/status"]) {
    app.get(path, { schema: h }, async (req) => {
      const states = Object.values(await desktop.processStates((await toolboxOf(forge, req)).sandbox));
      return { status: states.every((s) => s.running) ? "active" : states.some((s) => s.running) ? "partial" : "inactive" };
    });
  }
  app.get("/computeruse/process/:processName/status", { schema: { ...h, params: Name } }, async (req: FastifyRequest<{ Params: Static<typeof Name> }>) => {
    const states = await desktop.processStates((await toolboxOf(forge, req)).sandbox);
    return { processName: req.params.processName, running: desktop.processState(states, req.params.processName).running };
  });
  app.post("/computeruse/process/:processName/restart", { schema: { ...h, params: Name } }, async (req: FastifyRequest<{ Params: Static<typeof Name> }>) => {
    await desktop.restartProcess((await toolboxOf(forge, req)).sandbox, req.params.processName);
    return { message: `Process ${req.params.processName} restarted successfully`, processName: req.params.processName };
  });
  app.get("/computeruse/process/:processName/logs", { schema: { ...h, params: Name } }, async (req: FastifyRequest<{ Params: Static<typeof Name> }>) => ({
    processName: req.params.processName,
    logs: await desktop.processLog((await toolboxOf(forge, req)).sandbox, req.params.processName),
  }));
  // The desktop's processes write their output and errors to one log: both routes answer it.
  app.get("/computeruse/process/:processName/errors", { schema: { ...h, params: Name } }, async (req: FastifyRequest<{ Params: Static<typeof Name> }>) => ({
    processName: req.params.processName,
    errors: await desktop.processLog((await toolboxOf(forge, req)).sandbox, req.params.processName),
  }));

  app.get("/computeruse/mouse/position", { schema: h }, async (req) => desktop.cursor((await toolboxOf(forge, req)).sandbox));
  app.post("/computeruse/mouse/move", { schema: { ...h, body: XY } }, async (req: FastifyRequest<{ Body: Static<typeof XY> }>) => {
    await desktop.move((await toolboxOf(forge, req)).sandbox, req.body.x, req.body.y);
    return { x: req.body.x, y: req.body.y };
  });
  app.post("/computeruse/mouse/click", { schema: { ...h, body: Click } }, async (req: FastifyRequest<{ Body: Static<typeof Click> }>) => {
    const t = await toolboxOf(forge, req);
    await desktop.click(t.sandbox, req.body);
    return req.body.x === undefined ? desktop.cursor(t.sandbox) : { x: req.body.x, y: req.body.y };
  });
  app.post("/computeruse/mouse/drag", { schema: { ...h, body: Drag } }, async (req: FastifyRequest<{ Body: Static<typeof Drag> }>) => {
    await desktop.drag((await toolboxOf(forge, req)).sandbox, req.body);
    return { x: req.body.endX, y: req.body.endY };
  });
  app.post("/computeruse/mouse/scroll", { schema: { ...h, body: Scroll } }, async (req: FastifyRequest<{ Body: Static<typeof Scroll> }>) => {
    await desktop.scroll((await toolboxOf(forge, req)).sandbox, req.body);
    return { success: true };
  });
  app.post("/computeruse/keyboard/type", { schema: { ...h, body: TypeText } }, async (req: FastifyRequest<{ Body: Static<typeof TypeText> }>) => {
    await desktop.type((await toolboxOf(forge, req)).sandbox, req.body.text, req.body.delay ?? undefined);
    return {};
  });
  app.post("/computeruse/keyboard/key", { schema: { ...h, body: Key } }, async (req: FastifyRequest<{ Body: Static<typeof Key> }>) => {
    await desktop.press((await toolboxOf(forge, req)).sandbox, req.body.key, req.body.modifiers ?? []);
    return {};
  });
  app.post("/computeruse/keyboard/hotkey", { schema: { ...h, body: Hotkey } }, async (req: FastifyRequest<{ Body: Static<typeof Hotkey> }>) => {
    await desktop.press((await toolboxOf(forge, req)).sandbox, req.body.keys, [], "keys");
    return {};
  });

  const q = { ...h, querystring: ShotQuery };
  app.get("/computeruse/screenshot", { schema: q }, async (req: FastifyRequest<{ Querystring: Q }>) => shot(forge, req, {}));
  app.get("/computeruse/screenshot/region", { schema: q }, async (req: FastifyRequest<{ Querystring: Q }>) => shot(forge, req, { region: region(req.query) }));
  app.get("/computeruse/screenshot/compressed", { schema: q }, async (req: FastifyRequest<{ Querystring: Q }>) => shot(forge, req, compressed(req.query)));
  app.get("/computeruse/screenshot/region/compressed", { schema: q }, async (req: FastifyRequest<{ Querystring: Q }>) =>
    shot(forge, req, { region: region(req.query), ...compressed(req.query) }),
  );

  app.get("/computeruse/display/info", { schema: h }, async (req) => {
    const s = await desktop.screen((await toolboxOf(forge, req)).sandbox);
    return { displays: [{ id: 0, x: 0, y: 0, width: s.width, height: s.height, isActive: true }] };
  });
  app.get("/computeruse/display/windows", { schema: h }, async (req) => ({
    windows: (await desktop.windows((await toolboxOf(forge, req)).sandbox)).map((w) => ({
      id: w.id,
      title: w.title,
      x: w.x,
      y: w.y,
      width: w.width,
      height: w.height,
      isActive: w.active,
    })),
  }));

  app.post("/computeruse/recordings/start", { schema: { ...h, body: StartRecording } }, async (req: FastifyRequest<{ Body: Static<typeof StartRecording> }>, reply) => {
    const t = await toolboxOf(forge, req);
    return reply.status(201).send(recordingView(await desktop.startRecording(t.sandbox, req.body?.label || undefined)));
  });
  app.post("/computeruse/recordings/stop", { schema: { ...h, body: StopRecording } }, async (req: FastifyRequest<{ Body: Static<typeof StopRecording> }>) =>
    recordingView(await desktop.stopRecording((await toolboxOf(forge, req)).sandbox, req.body.id)),
  );
  app.get("/computeruse/recordings", { schema: h }, async (req) => ({ recordings: (await desktop.listRecordings((await toolboxOf(forge, req)).sandbox)).map(recordingView) }));
  app.get("/computeruse/recordings/:id", { schema: { ...h, params: RecordingId } }, async (req: FastifyRequest<{ Params: Static<typeof RecordingId> }>) =>
    recordingView(await desktop.recording((await toolboxOf(forge, req)).sandbox, req.params.id)),
  );
  app.delete("/computeruse/recordings/:id", { schema: { ...h, params: RecordingId } }, async (req: FastifyRequest<{ Params: Static<typeof RecordingId> }>, reply) => {
    await desktop.deleteRecording((await toolboxOf(forge, req)).sandbox, req.params.id);
    return reply.status(204).send();
  });
  app.get("/computeruse/recordings/:id/download", { schema: { ...h, params: RecordingId } }, async (req: FastifyRequest<{ Params: Static<typeof RecordingId> }>, reply) => {
    const t = await toolboxOf(forge, req);
    const r = await desktop.recording(t.sandbox, req.params.id);
    if (r.status === "recording") throw conflict(`recording ${r.id} is still running: stop it first`);
    const opened = await t.sandbox.openRead(r.file);
    reply.header("Content-Type", "video/ogg").header("Content-Disposition", `attachment; filename="${recordingView(r).fileName}"`);
    if (opened.length !== undefined) reply.header("Content-Length", String(opened.length));
    return reply.send(opened.stream);
  });

  app.all("/computeruse/a11y/*", { schema: h }, async () => {
    throw badRequest("the accessibility tree is not served by this server's desktop yet (docs/daytona.md#computer-use)");
  });
}
