// Output an LLM can read: a command's first and last bytes, with what lies between dropped and
// counted. The head says how it started, the tail how it ended (errors are usually there).

export class HeadTail {
  private head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;
  /** Every byte seen. */
  total = 0;

  constructor(private readonly max: number) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    const room = Math.ceil(this.max / 2) - this.headBytes;
    if (room > 0) {
      const part = chunk.subarray(0, room);
      this.head.push(part);
      this.headBytes += part.length;
      chunk = chunk.subarray(part.length);
    }
    if (!chunk.length) return;
    this.tail.push(chunk);
    this.tailBytes += chunk.length;
    const keep = Math.floor(this.max / 2);
    while (this.tailBytes - this.tail[0].length >= keep) this.tailBytes -= (this.tail.shift() as Buffer).length;
  }

  get truncated(): boolean {
    return this.total > this.max;
  }

  /** The kept text, with a marker where bytes were dropped. */
  text(): string {
    const head = Buffer.concat(this.head).toString("utf8");
    let tail = Buffer.concat(this.tail);
    if (!this.truncated) return head + tail.toString("utf8");
    tail = tail.subarray(tail.length - Math.floor(this.max / 2));
    const dropped = this.total - this.headBytes - tail.length;
    return `${head}\n… [${dropped} bytes omitted] …\n${tail.toString("utf8")}`;
  }
}
