// The ForgeVM REST API as the benchmarks call it: a JSON body in, the parsed answer out, and an
// error naming the call and its status otherwise.

/** A caller of the REST API under `base` (a server's URL). */
export function restApi(base: string) {
  return async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${base}/api/v1${path}`, {
      method,
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text.slice(0, 200)}`);
    return (text ? JSON.parse(text) : null) as any;
  };
}
