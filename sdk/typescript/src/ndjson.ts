// Reading NDJSON response bodies (streamed exec, streamed code runs) as the server flushes them.

/** The JSON values of a response body, one per non-empty line, as they arrive. */
export async function* ndjson<T>(res: Response): AsyncGenerator<T> {
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buf += dec.decode(value, { stream: true });
    for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) yield JSON.parse(line) as T;
    }
    if (done) return;
  }
}
