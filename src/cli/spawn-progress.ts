// The first spawn of an image or template pulls it (or builds it: a system image), boots it and freezes it into a base
// snapshot, which takes a while: the CLI shows those steps as the server reports them.
import type { Client, EventInfo } from "forgevm";
import { progress } from "./output.js";

function describe(e: EventInfo): string | null {
  switch (e.type) {
    case "image.pulling":
      return `pulling ${e.image}`;
    case "image.progress":
      return String(e.message);
    case "image.pulled":
      return `pulled ${e.image}`;
    case "image.building":
      return `building ${e.image} from Debian's archive (a few minutes, once)`;
    case "image.built":
      return `built ${e.image}`;
    case "snapshot.building":
      return `first start of ${e.template ? `template ${e.template}` : e.image}: booting it for its base snapshot (later spawns restore it)`;
    case "snapshot.created":
      return e.kind === "base" ? `base snapshot ready (${Math.round(Number(e.bytes) / 1048576)} MiB)` : null;
    default:
      return null;
  }
}

/** Runs `fn` (a spawn) while printing the pull and base-snapshot steps the server reports meanwhile. */
export async function withSpawnProgress<T>(client: Client, fn: () => Promise<T>): Promise<T> {
  const ctl = new AbortController();
  const watching = (async () => {
    try {
      for await (const e of client.events({ signal: ctl.signal })) {
        const line = describe(e);
        if (line) progress(line);
      }
    } catch {
      // progress is a courtesy: a broken event stream must not fail the spawn
    }
  })();
  try {
    return await fn();
  } finally {
    ctl.abort();
    await watching;
  }
}
