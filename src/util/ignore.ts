// Errors that do not matter where they happen (a process that already exited, a best-effort
// cleanup, a promise whose failure reaches its caller another way), said at the place:
// `.catch(ignore("the process may have exited"))`. With NODE_DEBUG=forgevm each one is logged
// to stderr with its reason, for the day one of them turns out to matter.
import { debuglog } from "node:util";

const log = debuglog("forgevm");

/** A catch handler that drops an error for the reason given, logging both at debug level. */
export function ignore(why: string): (e: unknown) => void {
  return (e) => log("ignored (%s): %s", why, e instanceof Error ? e.message : String(e));
}
