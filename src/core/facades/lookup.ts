// How the facades other than sandboxes name a sandbox: the narrow part of SandboxesFacade they use.
import type { SandboxRow, SandboxState } from "../../store/sandboxes.js";
import type { Sandbox } from "../guest/sandbox.js";

/** Finds sandboxes by id or name, as SandboxesFacade does. */
export interface SandboxLookup {
  idOf(idOrName: string): string;
  get(idOrName: string): SandboxRow;
  running(idOrName: string): Sandbox;
  list(ownerId?: string, states?: SandboxState[]): SandboxRow[];
}
