// Errors → HTTP for the REST server, in one place: every failure leaves as
// {"code","message","retryable"} with the status the error table (http/errors.ts) gives its code,
// whether it came from a route, core, the guest, Fastify's own checks or Node's HTTP parser.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { toApiError } from "../core/error-map.js";
import { ForgevmError } from "../http/errors.js";
import { errorBody } from "../http/error-body.js";

function send(reply: FastifyReply, e: ForgevmError) {
  // A reply that had started as something else (a download) must not keep its content type.
  return reply.status(e.status).type("application/json; charset=utf-8").send(errorBody(e));
}

/** Installs the error handler and the JSON 404 / 405 handler; `count` hears each error's code. */
export function installErrorHandling(app: FastifyInstance, routePatterns: { method: string; re: RegExp }[], count: (code: string) => void = () => {}): void {
  app.setErrorHandler((err, req, reply) => {
    const e = toApiError(err, { route: req.routeOptions.bodyLimit ?? app.initialConfig.bodyLimit ?? 0, server: app.initialConfig.bodyLimit ?? 0 });
    if (e.status >= 500) req.log.error({ err }, "request failed");
    count(e.code);
    return send(reply, e);
  });
  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split("?")[0];
    const methods = routePatterns.filter((r) => r.re.test(path)).map((r) => r.method);
    if (methods.length) {
      reply.header("Allow", [...new Set(methods)].join(", "));
      return send(reply, new ForgevmError("METHOD_NOT_ALLOWED", `${req.method} is not allowed on ${path}; use ${[...new Set(methods)].join(" or ")}`));
    }
    return send(reply, new ForgevmError("NOT_FOUND", `no route ${req.method} ${path}`));
  });
}

/** Fastify's `frameworkErrors`: a URL it cannot decode, before any route or hook runs. */
export function frameworkErrors(err: FastifyError, _req: FastifyRequest, reply: FastifyReply): void {
  void send(reply, err.code === "FST_ERR_BAD_URL" ? new ForgevmError("BAD_REQUEST", `the URL is not valid: ${err.message}`) : toApiError(err));
}
