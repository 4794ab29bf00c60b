// The API key as a browser sends it where it cannot set a header: EventSource and WebSocket calls
// to the REST API's event stream and exec WebSocket carry it as an api_key query parameter or a
// cookie. Read here for the REST interface and for the cluster front, which relays those routes.
import { keyMatches } from "./api-key.js";

const BROWSER_STREAM_ROUTE = /^\/api\/v1\/(events|sandboxes\/[^/]+\/exec\/ws)$/;

/** The keys a browser stream route (SSE, the exec WebSocket) carries as an api_key query parameter or cookie. */
export function browserStreamKeys(url: string, cookie: string | undefined): string[] {
  if (!BROWSER_STREAM_ROUTE.test(url.split("?")[0])) return [];
  const fromQuery = new URL(url, "http://x").searchParams.get("api_key");
  const fromCookie = /(?:^|;\s*)forgevm_api_key=([^;]+)/.exec(cookie ?? "")?.[1];
  return [fromQuery, fromCookie ? decodeCookie(fromCookie) : null].filter((k): k is string => !!k);
}

/** Whether a browser stream route carries the key as an api_key query parameter or cookie. */
export function browserStreamKeyMatches(url: string, cookie: string | undefined, apiKey: string): boolean {
  return browserStreamKeys(url, cookie).some((k) => keyMatches(k, apiKey));
}

/** A cookie value as sent, percent-decoded when it can be (a malformed one is taken as it is). */
function decodeCookie(v: string): string {
  try {
    return decodeURIComponent(v);
  } catch {
    return v;
  }
}
