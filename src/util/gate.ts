// A first-come, first-served limit on work in flight. Starting a VM is CPU the host has a fixed
// amount of: a hundred restores started at once share it and all finish together at the end,
// while the same hundred let through a few at a time finish one after another, each as soon as
// it can (the median halves; the last finishes no later).

export class Gate {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly limit: number) {
    if (!(limit >= 1)) throw new Error(`a gate needs a limit of at least 1, got ${limit}`);
  }

  /** How many wait for their turn now. */
  get queued(): number {
    return this.waiting.length;
  }

  /** Runs `work` when fewer than the limit run, in the order asked. */
  async run<T>(work: () => Promise<T>): Promise<T> {
    if (this.running >= this.limit) await new Promise<void>((go) => this.waiting.push(go));
    else this.running++;
    try {
      return await work();
    } finally {
      const next = this.waiting.shift();
      // The slot passes straight to the next in line, so a newcomer cannot take it first.
      if (next) next();
      else this.running--;
    }
  }
}
