// Relaying process output as {"stream","data"} chunks, for the NDJSON and WebSocket execs.
import { StringDecoder } from "node:string_decoder";

/**
 * Sends one output stream as JSON chunks, never splitting a UTF-8 character between chunks;
 * resolves when the stream ends. When `send` returns false the stream pauses until `onDrain`
 * calls back.
 */
export function relayChunks(name: "stdout" | "stderr", stream: NodeJS.ReadableStream, send: (json: string) => boolean, onDrain?: (resume: () => void) => void): Promise<void> {
  return new Promise<void>((resolve) => {
    const dec = new StringDecoder("utf8");
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
