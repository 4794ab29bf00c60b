// Network routes of a sandbox: its mode, allowlist (changeable live), egress decision log and
// published ports.
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { Type } from "typebox";
import type { Forge } from "../../../core/forge.js";
import { AllowRequest, EgressEntry, EgressRulesRequest, IdParams, Network, NetworkUpdate, PortMapping, PortRequest, Status } from "../../../schemas/rest.js";
import { networkView } from "../views.js";

export const networkRoutes: FastifyPluginAsyncTypebox<{ forge: Forge }> = async (app, { forge }) => {
  app.get("/sandboxes/:id/network", { schema: { tags: ["network"], params: IdParams, response: { 200: Network } } }, async (req) => networkView(forge.network.get(req.params.id)));

  app.put(
    "/sandboxes/:id/network/allow",
    {
      schema: {
        tags: ["network"],
        params: IdParams,
        body: AllowRequest,
        response: { 200: Network },
      },
    },
    async (req) => networkView(await forge.network.setAllowlist(req.params.id, req.body.allow)),
  );

  app.put("/sandboxes/:id/network", { schema: { tags: ["network"], params: IdParams, body: NetworkUpdate, response: { 200: Network } } }, async (req) =>
    networkView(await forge.network.setEgress(req.params.id, { mode: req.body.mode, allow: req.body.allow, deny: req.body.deny, rules: req.body.egress_rules })),
  );

  app.put("/sandboxes/:id/network/rules", { schema: { tags: ["network"], params: IdParams, body: EgressRulesRequest, response: { 200: Network } } }, async (req) =>
    networkView(await forge.network.setEgress(req.params.id, { rules: req.body.egress_rules })),
  );

  app.get(
    "/sandboxes/:id/egress",
    {
      schema: {
        tags: ["network"],
        params: IdParams,
        querystring: Type.Object({ lines: Type.Optional(Type.String({ pattern: "^[0-9]{1,6}$" })) }),
        response: { 200: Type.Array(EgressEntry) },
      },
    },
    async (req) => forge.network.egressLog(req.params.id, req.query.lines ? Math.max(1, Number(req.query.lines)) : 100),
  );

  app.post("/sandboxes/:id/ports", { schema: { tags: ["network"], params: IdParams, body: PortRequest, response: { 201: PortMapping } } }, async (req, reply) => {
    const m = await forge.network.publishPort(req.params.id, req.body.port);
    reply.status(201);
    return m;
  });

  app.delete(
    "/sandboxes/:id/ports/:host_port",
    {
      schema: {
        tags: ["network"],
        params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }), host_port: Type.String({ pattern: "^[0-9]{1,5}$" }) }),
        response: { 200: Status("unpublished") },
      },
    },
    async (req) => {
      await forge.network.unpublishPort(req.params.id, Number(req.params.host_port));
      return { status: "unpublished" as const };
    },
  );
};
