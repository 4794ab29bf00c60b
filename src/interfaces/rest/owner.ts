// Who a request acts for, decided here for every route: the X-User-ID header, which overrides an
// owner_id the body or query names (the REST contract's rule for spawns, kept for every resource).
import type { FastifyRequest } from "fastify";

/** The owner a request names: its X-User-ID header, else `named` (its body's or query's owner_id). */
export function ownerOf(req: FastifyRequest, named?: string): string | undefined {
  const header = req.headers["x-user-id"];
  return (typeof header === "string" && header) || named || undefined;
}
