// A sandbox's code contexts: each a runtime process of its own (kernel.ts) whose variables,
// imports and working directory persist between executions. Without a context, code runs in the
// default context of its language (one per language and user, made on first use).
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { badRequest, ForgevmError, notFound } from "../../../http/errors.js";
import type { Guest } from "../guest.js";
import { Kernel } from "./kernel.js";
import { LANGUAGE_NAMES, parseLanguage, RUNTIME_DIR, type CodeContextInfo, type CodeEvent, type CodeLanguage, type Execution } from "./types.js";

/** Most contexts one sandbox may hold. */
export const MAX_CONTEXTS = 32;
/** The runtimes shipped with ForgeVM (agent/runtime/), written into the guest on first use. */
const RUNTIMES = fileURLToPath(new URL("../../../../../agent/runtime/", import.meta.url));

export interface RunOptions {
  language?: string;
  /** A context by id; its language wins. */
  contextId?: string;
  /** Environment of this execution only. */
  env?: Record<string, string>;
  /** Interrupt the code after this many ms (the context survives). */
  timeoutMs?: number;
  /** Interrupts the code when it aborts (a client that went away). */
  signal?: AbortSignal;
  onEvent?: (e: CodeEvent) => void;
  /** Who a default context runs as, and where it starts (the sandbox's defaults otherwise). */
  user?: string;
  cwd?: string;
}

interface Context {
  info: CodeContextInfo;
  kernel: Kernel;
}

export class CodeContexts {
  private readonly contexts = new Map<string, Context>();
  private readonly defaults = new Map<string, string>();
  private installed: Promise<void> | null = null;

  constructor(
    private readonly sandbox: Guest,
    /** Where contexts start when the caller names no directory. */
    private readonly homeOf: (user: string | undefined) => Promise<string>,
  ) {}

  /** Writes the runtimes into the guest (once per VM). */
  private install(): Promise<void> {
    this.installed ??= (async () => {
      for (const name of ["python.py", "node.js"]) {
        const body = await readFile(`${RUNTIMES}${name}`);
        await this.sandbox.writeFile(`${RUNTIME_DIR}/${name}`, body, { mode: 0o644 });
      }
    })();
    this.installed.catch(() => (this.installed = null));
    return this.installed;
  }

  /** Starts a new context; resolves once its runtime is ready. */
  async create(opts: { language?: string; cwd?: string; user?: string } = {}): Promise<CodeContextInfo> {
    const language = this.language(opts.language) ?? "python";
    if (this.contexts.size >= MAX_CONTEXTS) throw new ForgevmError("CONFLICT", `sandbox ${this.sandbox.id} has ${MAX_CONTEXTS} code contexts already: delete one first`);
    const cwd = opts.cwd ?? (await this.homeOf(opts.user));
    if (!cwd.startsWith("/")) throw badRequest(`cwd must be an absolute path, got "${cwd}"`);
    const info: CodeContextInfo = { id: randomUUID(), language, cwd, user: opts.user ?? null };
    await this.install();
    const kernel = new Kernel(this.sandbox, { language, cwd, user: opts.user });
    this.contexts.set(info.id, { info, kernel });
    try {
      await kernel.start();
    } catch (e) {
      this.contexts.delete(info.id);
      throw e;
    }
    return info;
  }

  /** The sandbox's contexts. */
  list(): CodeContextInfo[] {
    return [...this.contexts.values()].map((c) => c.info);
  }

  get(id: string): CodeContextInfo {
    return this.find(id).info;
  }

  private find(id: string): Context {
    const c = this.contexts.get(id);
    if (!c) throw notFound(`code context ${id} not found in sandbox ${this.sandbox.id}`);
    return c;
  }

  /** Stops a context; its state is gone. */
  async remove(id: string): Promise<void> {
    const c = this.find(id);
    this.contexts.delete(id);
    for (const [k, v] of this.defaults) if (v === id) this.defaults.delete(k);
    await c.kernel.stop();
  }

  /** Restarts a context's runtime: same id, fresh state. */
  async restart(id: string): Promise<CodeContextInfo> {
    const c = this.find(id);
    await c.kernel.stop();
    await c.kernel.start();
    return c.info;
  }

  /** Runs code to its end in a context (the default one of its language unless one is named) and collects what it produced. */
  async run(code: string, opts: RunOptions = {}): Promise<Execution> {
    if (typeof code !== "string") throw badRequest("code must be a string");
    const language = this.language(opts.language);
    let ctx: Context;
    if (opts.contextId) {
      ctx = this.find(opts.contextId);
      if (language && language !== ctx.info.language)
        throw badRequest(`language: context ${ctx.info.id} runs ${ctx.info.language}; leave language out or use a ${language} context`);
    } else {
      ctx = await this.defaultContext(language ?? "python", opts.user, opts.cwd);
    }
    const ex: Execution = { results: [], stdout: [], stderr: [], error: null, executionCount: 0 };
    const timeout = opts.timeoutMs ? AbortSignal.timeout(opts.timeoutMs) : undefined;
    const signal = timeout && opts.signal ? AbortSignal.any([timeout, opts.signal]) : (timeout ?? opts.signal);
    const collect = (event: CodeEvent) => {
      let e = event;
      // An interrupt we sent for the timeout reads as what it was.
      if (e.type === "error" && e.name === "KeyboardInterrupt" && timeout?.aborted) {
        e = { ...e, name: "TimeoutError", value: `the code ran past its timeout of ${opts.timeoutMs} ms and was interrupted` };
      }
      if (e.type === "stdout") ex.stdout.push(e.text);
      else if (e.type === "stderr") ex.stderr.push(e.text);
      else if (e.type === "error") ex.error = { name: e.name, value: e.value, traceback: e.traceback };
      else if (e.type === "number_of_executions") ex.executionCount = e.execution_count;
      else {
        const { type: _t, ...r } = e;
        ex.results.push(r);
      }
      opts.onEvent?.(e);
    };
    await ctx.kernel.run(code, opts.env, collect, signal);
    return ex;
  }

  /** The default context of a language (python when none is named), started now if it is not running. */
  async prepare(language?: string, user?: string, cwd?: string): Promise<CodeContextInfo> {
    return (await this.defaultContext(this.language(language) ?? "python", user, cwd)).info;
  }

  private async defaultContext(language: CodeLanguage, user: string | undefined, cwd: string | undefined): Promise<Context> {
    const key = `${language}\0${user ?? ""}`;
    const id = this.defaults.get(key);
    if (id && this.contexts.has(id)) return this.find(id);
    const info = await this.create({ language, user, cwd });
    this.defaults.set(key, info.id);
    return this.find(info.id);
  }

  private language(name: string | undefined): CodeLanguage | null {
    const l = parseLanguage(name);
    if (name && !l) throw badRequest(`language "${name}" is not one this server runs: use one of ${LANGUAGE_NAMES.join(", ")}`);
    return l;
  }
}
