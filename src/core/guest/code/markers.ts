// Splits a runtime's output into what the code printed and the runtime's own messages: a message
// is a line that starts with the marker; everything else is text, passed on as soon as it comes
// (minus a possible beginning of a marker at the very end, held until the next chunk decides).
import { StringDecoder } from "node:string_decoder";

/** The longest message line we accept; a longer one is passed on as text (a runtime's results are smaller). */
const MAX_MESSAGE = 64 * 1024 * 1024;

export class MarkedStream {
  private readonly decoder = new StringDecoder("utf8");
  private pending = "";
  private inMessage = false;

  constructor(
    private readonly mark: string,
    private readonly on: { text: (t: string) => void; message: (m: string) => void },
  ) {}

  push(chunk: Buffer): void {
    this.feed(this.decoder.write(chunk));
  }

  end(): void {
    this.feed(this.decoder.end());
    if (this.pending) this.inMessage ? this.on.message(this.pending.trim()) : this.on.text(this.pending);
    this.pending = "";
  }

  private feed(s: string): void {
    this.pending += s;
    for (;;) {
      if (this.inMessage) {
        const nl = this.pending.indexOf("\n");
        if (nl < 0) {
          if (this.pending.length > MAX_MESSAGE) {
            this.inMessage = false;
            this.on.text(this.pending);
            this.pending = "";
          }
          return;
        }
        this.on.message(this.pending.slice(0, nl).trim());
        this.pending = this.pending.slice(nl + 1);
        this.inMessage = false;
        continue;
      }
      const at = this.pending.indexOf(this.mark);
      if (at >= 0) {
        if (at > 0) this.on.text(this.pending.slice(0, at));
        this.pending = this.pending.slice(at + this.mark.length);
        this.inMessage = true;
        continue;
      }
      // Keep back a tail that could be the start of a marker split across chunks.
      let keep = 0;
      for (let k = Math.min(this.mark.length - 1, this.pending.length); k > 0; k--) {
        if (this.mark.startsWith(this.pending.slice(-k))) {
          keep = k;
          break;
        }
      }
      const text = this.pending.slice(0, this.pending.length - keep);
      if (text) this.on.text(text);
      this.pending = this.pending.slice(this.pending.length - keep);
      return;
    }
  }
}
