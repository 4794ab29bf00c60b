// Relaying process output as {"stream","data"} chunks, for the NDJSON and WebSocket execs.
import { StringDecoder } from "node:string_decoder";

/**
 * Sends one output stream as JSON chunks, never splitting a UTF-8 character between chunks (or,
 * with `base64`, each chunk's bytes as they are); resolves when the stream ends. When `send`
 * returns false the stream pauses until `onDrain` calls back.
 */
export function relayChunks(
  name: "stdout" | "stderr",
  stream: NodeJS.ReadableStream,
  send: (json: string) => boolean,
  onDrain?: (resume: () => void) => void,
  encoding: "utf8" | "base64" = "utf8",
): Promise<void> {
  return new Promise<void>((resolve) => {
    // Text waits for a split character's end; bytes go at once, each chunk whole base64 (a
    // binary protocol's last frame must not wait for more output).
    const dec = encoding === "utf8" ? new StringDecoder("utf8") : { write: (c: Buffer) => c.toString("base64"), end: () => "" };
    stream.on("data", (c: Buffer) => {
      const data = dec.write(c);
      if (data && !send(JSON.stringify({ stream: name, data })) && onDrain) {
        stream.pause();
        onDrain(() => stream.resume());
      }
    });
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      const rest = dec.end();
      if (rest) send(JSON.stringify({ stream: name, data: rest }));
      resolve();
    };
    stream.once("end", end);
    stream.once("close", end);
  });
}
