// The guest's serial console, captured to a bounded per-VM log file plus an in-memory tail
// that boot errors quote.
import type { Readable } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import { openSync, writeSync, closeSync, readFileSync, writeFileSync, fstatSync } from "node:fs";

const FILE_CAP = 1024 * 1024; // bytes kept on disk; older output is dropped
const TAIL_CAP = 16 * 1024;

/**
 * Kernel lines that are true of every microvm and alarm without reason: the machine type has no
 * PCI bus, so the kernel's x86 PCI set-up reports that it found no way to reach one, at error
 * level (pci=off does not silence it). Dropped from the log, which users read for real trouble.
 */
const NOISE = /^\[[ \d.]+\] PCI: Fatal: No config space access function found\r?\n/gm;
/** A partial line is held back until its end comes, if it could still be noise (short enough). */
const CARRY_MAX = 160;

export class ConsoleLog {
  private fd: number;
  private size = 0;
  private tail = "";
  private socket: Readable | null = null;
  private readonly decoder = new StringDecoder("utf8");
  private carry = "";

  constructor(readonly path: string) {
    this.fd = openSync(path, "a", 0o600);
    this.size = fstatSync(this.fd).size;
  }

  /** Starts reading the console: QEMU's console socket, or the output of a sandbox's processes. */
  attach(socket: Readable): void {
    this.socket = socket;
    socket.on("data", (d: Buffer) => this.guest(d));
    socket.on("error", () => {}); // the VM went away; nothing to do
  }

  /** Adds lines of the host's own to the log (what a restored guest printed before its snapshot). */
  note(text: string): void {
    this.append(Buffer.from(text));
  }

  /** The last `bytes` characters the guest printed. */
  getTail(bytes = 4096): string {
    return (this.tail + this.carry).slice(-bytes);
  }

  close(): void {
    if (this.carry) this.append(Buffer.from(this.carry));
    this.carry = "";
    this.socket?.destroy();
    this.socket = null;
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }

  // What the guest printed, less the noise; a partial line that may be noise waits for its end.
  private guest(d: Buffer): void {
    let text = (this.carry + this.decoder.write(d)).replace(NOISE, "");
    const nl = text.lastIndexOf("\n");
    const partial = text.slice(nl + 1);
    this.carry = partial.length <= CARRY_MAX ? partial : "";
    if (this.carry) text = text.slice(0, nl + 1);
    if (text) this.append(Buffer.from(text));
  }

  private append(d: Buffer): void {
    this.tail = (this.tail + d.toString("utf8")).slice(-TAIL_CAP);
    if (this.fd < 0) return;
    try {
      if (this.size + d.length > FILE_CAP) this.compact();
      writeSync(this.fd, d);
      this.size += d.length;
    } catch {
      // A full disk: the file misses this part; the tail in memory keeps the newest.
    }
  }

  // Keep the newest half when the log reaches its cap, so a chatty guest cannot fill the disk.
  private compact(): void {
    closeSync(this.fd);
    const keep = readFileSync(this.path).subarray(-FILE_CAP / 2);
    writeFileSync(this.path, keep, { mode: 0o600 });
    this.fd = openSync(this.path, "a", 0o600);
    this.size = keep.length;
  }
}
