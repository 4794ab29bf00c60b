// The e2b provider: each sandbox is a sandbox of an E2B-compatible service (E2B's cloud, or
// another ForgeVM server's E2B routes), created through its control plane with the API key. The
// agent is uploaded through the sandbox's envd and started there as root (`--stdio`); its stdout
// comes back in the process's output events and its stdin goes in with SendInput, so core drives
// it like any VM. Snapshots, forks, volumes and commits are refused by name.
import { join } from "node:path";
import type { Paths } from "../../config/paths.js";
import type { ConsoleLog } from "../console-log.js";
import { DelegatingProvider, KEEPALIVE_MS, type Far } from "../delegating-provider.js";
import type { ProviderHealth, VmSpec } from "../provider.js";
import { RELAYED_AGENT_PATH, RelayedStream } from "../relayed-agent.js";
import { E2bApi, type E2bEndpoints, type E2bSandbox } from "./e2b-api.js";

export interface E2bProviderOptions extends E2bEndpoints {
  paths: Paths;
  /** The template far sandboxes are made from (default "base"). */
  template?: string;
  /** Hello deadline once the far sandbox runs (default 30 s). */
  bootTimeoutMs?: number;
}

/** The far sandbox's lifetime in seconds; renewed while ours runs. */
const FAR_TIMEOUT_S = Math.round((KEEPALIVE_MS * 4) / 1000);

export class E2bProvider extends DelegatingProvider {
  readonly name = "e2b";
  private readonly api: E2bApi;

  constructor(private readonly opts: E2bProviderOptions) {
    super(opts.paths, join(opts.paths.dataDir, "e2b"), opts.bootTimeoutMs ?? 30_000);
    this.api = new E2bApi(opts);
  }

  protected get where(): string {
    return this.opts.apiUrl;
  }

  async health(): Promise<ProviderHealth> {
    const details: Record<string, string> = { api_url: this.opts.apiUrl, template: this.opts.template ?? "base" };
    const problems: string[] = [];
    try {
      const list = await this.api.control<unknown[]>("GET", "/sandboxes");
      details.running = String(Array.isArray(list) ? list.length : 0);
    } catch (e) {
      problems.push((e as Error).message);
    }
    return { name: this.name, healthy: problems.length === 0, accel: null, problems, details };
  }

  protected async create(spec: VmSpec): Promise<Far> {
    const sb = await this.api.control<E2bSandbox>("POST", "/sandboxes", {
      templateID: this.opts.template ?? "base",
      timeout: FAR_TIMEOUT_S,
      metadata: { "forgevm.remote_of": spec.id },
      // Allowlisted egress comes back through this server's proxy; only "full" opens the far sandbox's own.
      allow_internet_access: !!spec.nic,
    });
    return {
      record: { sandboxID: sb.sandboxID, envdAccessToken: sb.envdAccessToken, domain: sb.domain ?? null },
      keep: () => this.api.control("POST", `/sandboxes/${sb.sandboxID}/timeout`, { timeout: FAR_TIMEOUT_S }),
      kill: () => this.api.control("DELETE", `/sandboxes/${sb.sandboxID}`),
    };
  }

  protected async killRecord(record: Record<string, unknown>): Promise<void> {
    await this.api.control("DELETE", `/sandboxes/${String(record.sandboxID)}`);
  }

  protected async run(far: Far, agent: Buffer, console: ConsoleLog): Promise<{ stream: RelayedStream; exited: Promise<void> }> {
    const sb = far.record as unknown as E2bSandbox;
    await this.api.upload(sb, RELAYED_AGENT_PATH, agent);
    const stream = new RelayedStream();
    let pid: (value: number) => void = () => {};
    const started = new Promise<number>((r) => (pid = r));
    const aborter = new AbortController();
    const exited = (async () => {
      try {
        for await (const ev of this.api.start(sb, "/bin/sh", ["-c", `chmod 755 ${RELAYED_AGENT_PATH} && exec ${RELAYED_AGENT_PATH} --stdio`], aborter.signal)) {
          if ("start" in ev) pid(ev.start.pid);
          else if ("data" in ev && ev.data.stdout) stream.deliver(Buffer.from(ev.data.stdout, "base64"));
          else if ("data" in ev && ev.data.stderr) console.note(Buffer.from(ev.data.stderr, "base64").toString());
          else if ("end" in ev) console.note(`relay: the agent ended (exit ${ev.end.exitCode ?? "?"}${ev.end.error ? `, ${ev.end.error}` : ""})\n`);
        }
      } catch (e) {
        console.note(`relay: ${(e as Error).message}\n`);
      } finally {
        stream.finish();
      }
    })();
    stream.attach({ ...this.inputPump(sb, started, console), abort: () => aborter.abort() });
    return { stream, exited };
  }

  /** Stdin for the far agent: writes in order, those made while one is in flight sent together. */
  private inputPump(sb: E2bSandbox, started: Promise<number>, console: ConsoleLog) {
    const pending: Buffer[] = [];
    let sending = false;
    let closing = false;
    let closed = false;
    const pump = async (): Promise<void> => {
      if (sending || closed) return;
      sending = true;
      try {
        const pid = await started;
        while (pending.length) await this.api.sendInput(sb, pid, Buffer.concat(pending.splice(0)));
        if (closing) {
          closed = true;
          await this.api.closeStdin(sb, pid);
        }
      } catch (e) {
        console.note(`relay: ${(e as Error).message}\n`);
      } finally {
        sending = false;
      }
      // What was written while the last call was in flight.
      if (pending.length || (closing && !closed)) return pump();
    };
    return {
      write: (b: Buffer) => {
        pending.push(b);
        void pump();
      },
      end: () => {
        closing = true;
        void pump();
      },
    };
  }
}
