// The host's side of idle memory: kernel same-page merging (KSM), which the server may turn on
// while it runs (config memory.ksm; host-wide, so off unless asked, and put back as it was when
// the server stops), and the lines `doctor` shows about memory reclaim.
import { readFile, writeFile } from "node:fs/promises";
import { ignore } from "../../util/ignore.js";

const KSM_RUN = "/sys/kernel/mm/ksm/run";

/** Turns KSM on; resolves with what puts it back (null when it was on already or the host has none). */
export async function enableKsm(): Promise<(() => Promise<void>) | null> {
  const was = (await readFile(KSM_RUN, "utf8").catch(() => null))?.trim();
  if (was === undefined || was === "1") return null;
  await writeFile(KSM_RUN, "1");
  return async () => {
    await writeFile(KSM_RUN, was).catch(ignore("KSM stays as the sandbox left it: a tuning, not a state"));
  };
}

/** What doctor says of KSM: on (with how many pages it merged), off, or not on this host. */
export async function ksmState(): Promise<string> {
  const run = (await readFile(KSM_RUN, "utf8").catch(() => null))?.trim();
  if (run === undefined) return "unavailable (the host kernel has no KSM)";
  if (run !== "1") return "off (memory.ksm: true turns it on while the server runs; host-wide, costs a kernel thread's CPU)";
  const sharing = (await readFile("/sys/kernel/mm/ksm/pages_sharing", "utf8").catch(() => "?")).trim();
  return `on (${sharing} pages merged; only anonymous guest pages, so under TCG not the translation cache)`;
}

/** doctor's line on idle reclaim: after how long an unused sandbox gives its page cache back, or off. */
export function idleReclaimState(afterMs: number): string {
  return afterMs > 0
    ? `after ${Math.round(afterMs / 1000)}s unused the guest drops its clean page cache and compacts, and free page reporting gives the blocks back (memory.reclaim_after)`
    : "off (memory.reclaim_after: 0)";
}
