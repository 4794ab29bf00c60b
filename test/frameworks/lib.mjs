// What every driver shares: steps that print what they return (so a failure names its step), and
// an HTTP request to an exposed port's endpoint as a client that resolves its host would send it.
import { request } from "node:http";

/** Runs one step; prints `ok <name> <json>` or `FAIL <name> <error>` and rethrows. */
export async function step(name, f) {
  try {
    const r = await f();
    console.log(`ok ${name} ${JSON.stringify(r ?? null).slice(0, 400)}`);
    return r;
  } catch (e) {
    console.log(`FAIL ${name} ${e?.stack ?? e}`);
    throw e;
  }
}

/**
 * GET / of an exposed port's endpoint, until it answers 200 (its server starts in the background).
 * The connection goes to this machine with the endpoint's Host: `*.localhost` names resolve to it
 * in browsers and curl, not in every resolver.
 */
export async function getEndpoint(ep, path = "/") {
  const query = ep.query ? `?${ep.query}` : "";
  for (let i = 0; i < 100; i++) {
    const r = await new Promise((resolve) => {
      const req = request({ host: "127.0.0.1", port: ep.port, path: `${path}${query}`, headers: { host: `${ep.host}:${ep.port}` } }, (res) => {
        let body = "";
        res.on("data", (c) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode, body }));
      });
      req.on("error", (e) => resolve({ status: 0, body: String(e) }));
      req.end();
    });
    if (r.status === 200) return r;
    await new Promise((res) => setTimeout(res, 200));
  }
  throw new Error(`${JSON.stringify(ep)} never answered 200`);
}
