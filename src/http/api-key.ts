// The API key check every interface shares: constant time whatever the lengths.
import { createHash, timingSafeEqual } from "node:crypto";

/** Whether `given` is the API key, compared in constant time. */
export function keyMatches(given: string, expected: string): boolean {
  // Hash both so the comparison takes the same time whatever the lengths.
  const a = createHash("sha256").update(given).digest();
  const b = createHash("sha256").update(expected).digest();
  return timingSafeEqual(a, b);
}

/**
 * Set by a front that let a request in with a cluster key and relays it with the operator's key
 * (nodes know no other): nothing in the node's answer may show the key it now sees.
 */
export const ON_BEHALF_HEADER = "x-forgevm-on-behalf";
