// What a sandbox that has no VMM on this host (local namespaces, a delegated sandbox elsewhere)
// answers for the Vm methods only a VMM can carry out. Core refuses these by the provider's
// features before they are called; reaching one is a bug, said plainly.
import type { CaptureResult } from "./provider.js";

export abstract class Vmless {
  /** Why this sandbox has no snapshots, disk copies or re-attaching. */
  protected abstract readonly noVmm: string;

  release(): void {
    throw new Error(this.noVmm);
  }

  async snapshot(): Promise<CaptureResult> {
    throw new Error(this.noVmm);
  }

  async prepareSnapshot(): Promise<null> {
    throw new Error(this.noVmm);
  }

  async freeze(): Promise<CaptureResult> {
    throw new Error(this.noVmm);
  }

  async copyDisk(): Promise<null> {
    throw new Error(this.noVmm);
  }

  async setNice(): Promise<void> {}

  // No VMM writes a disk of this host for it: nothing waits for space.
  async waitingForDisk(): Promise<boolean> {
    return false;
  }

  async continueAfterDisk(): Promise<void> {}
}
