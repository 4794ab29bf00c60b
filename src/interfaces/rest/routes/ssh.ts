// ssh into a sandbox (docs/ssh.md): POST /sandboxes/{id}/ssh readies the guest's sshd for the
// caller's keys; GET /sandboxes/{id}/tcp/{port} is a WebSocket carrying one TCP connection to a
// port of the guest's loopback (binary messages both ways), which `forgevm ssh-proxy` runs ssh
// over. Neither needs a network device in the guest or a published port. A paused sandbox is
// resumed by either.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { Duplex } from "node:stream";
import type { Forge } from "../../../core/forge.js";
import { toApiError } from "../../../core/error-map.js";
import { IdParams } from "../../../schemas/rest.js";
import { SshAccess, SshRequest } from "../../../schemas/ssh.js";

const TcpParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }), port: Type.String({ pattern: "^[0-9]{1,5}$" }) });
/** Bytes a client may send ahead of the guest's reads before the socket stops reading it. */
const HIGH_WATER = 1024 * 1024;

export const sshRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.post("/sandboxes/:id/ssh", { schema: { tags: ["ssh"], params: IdParams, body: SshRequest, response: { 200: SshAccess } } }, async (req) =>
    forge.ssh.prepare(req.params.id, { user: req.body.user, publicKeys: req.body.public_keys }),
  );

  app.get("/sandboxes/:id/tcp/:port", { websocket: true, schema: { tags: ["ssh"], params: TcpParams } }, (ws, req) => {
    const { id, port } = req.params as { id: string; port: string };
    let guest: Duplex | null = null;
    const early: Buffer[] = [];
    let closed = false;
    ws.on("message", (data: Buffer) => {
      if (guest) {
        if (!guest.write(data) && !ws.isPaused) {
          ws.pause();
          guest.once("drain", () => ws.resume());
        }
      } else if (early.reduce((n, b) => n + b.length, 0) < HIGH_WATER) early.push(data);
      else ws.close(1009, "sent too much before the guest port answered");
    });
    ws.on("close", () => {
      closed = true;
      guest?.end();
    });
    (async () => {
      const n = Number(port);
      const sb = await forge.sandboxes.use(id, "tcp");
      const conn = await forge.network.openPort(sb.id, n);
      if (!conn) return ws.close(4404, `nothing listens on port ${n} of sandbox ${sb.id}`);
      if (closed) return conn.destroy();
      guest = conn;
      for (const b of early.splice(0)) conn.write(b);
      conn.on("data", (b: Buffer) => {
        ws.send(b, { binary: true });
        if (ws.bufferedAmount > HIGH_WATER) {
          conn.pause();
          const resume = setInterval(() => {
            if (ws.bufferedAmount > HIGH_WATER / 4 && ws.readyState === ws.OPEN) return;
            clearInterval(resume);
            conn.resume();
          }, 10);
        }
      });
      conn.on("end", () => ws.close(1000, "the guest closed the connection"));
      conn.on("error", () => ws.close(1011, "the guest connection failed"));
      conn.on("close", () => ws.readyState === ws.OPEN && ws.close(1000, "closed"));
    })().catch((e) => {
      const err = toApiError(e);
      // 4000 + the HTTP status: a client tells "not found" from "conflict" without a body.
      ws.close(4000 + err.status, err.message.slice(0, 120));
    });
  });
};
