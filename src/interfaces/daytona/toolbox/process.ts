// The toolbox's one-shot processes: `execute` (a command line run by the shell, stdout and stderr
// merged in the order they came, the process group killed at `timeout`, which is a 408) and
// `code-run` (Python or JavaScript from stdin, as the daemon runs them), and the home and work
// directories the SDK asks for.
import type { FastifyInstance, FastifyRequest } from "fastify";
import { StringMap } from "../../../schemas/fields.js";
import { Type, type Static } from "typebox";
import type { Forge } from "../../../core/forge.js";
import { badRequest } from "../../../http/errors.js";
import { DaemonError } from "../errors.js";
import { toolboxOf } from "./context.js";

const MAX_TIMEOUT_S = 24 * 3600;
const MAX_OUTPUT = 16 * 1024 * 1024;

const ExecuteBody = Type.Object(
  {
    command: Type.String({ minLength: 1 }),
    timeout: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_TIMEOUT_S })),
    cwd: Type.Optional(Type.String({ minLength: 1 })),
    envs: Type.Optional(StringMap),
  },
  { additionalProperties: true },
);
const CodeRunBody = Type.Object(
  {
    code: Type.String(),
    language: Type.Optional(Type.String()),
    argv: Type.Optional(Type.Array(Type.String())),
    envs: Type.Optional(StringMap),
    timeout: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_TIMEOUT_S })),
  },
  { additionalProperties: true },
);

/** How each language's code runs, read from stdin. */
const RUNNERS: Record<string, string[]> = {
  python: ["python3", "-u", "-"],
  javascript: ["node", "-"],
};

const timedOut = (s: number) => new DaemonError("BAD_REQUEST", `the command ran past its timeout of ${s} s and was killed`, "PROCESS_EXECUTION_TIMEOUT", 408);

export async function processRoutes(app: FastifyInstance, { forge }: { forge: Forge }): Promise<void> {
  app.get("/user-home-dir", { schema: { hide: true } }, async (req) => ({ dir: (await toolboxOf(forge, req)).user.home }));
  app.get("/work-dir", { schema: { hide: true } }, async (req) => ({ dir: (await toolboxOf(forge, req)).workDir }));

  app.post("/process/execute", { schema: { body: ExecuteBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof ExecuteBody> }>) => {
    const t = await toolboxOf(forge, req);
    const b = req.body;
    // In the sandbox's shell, with stderr into stdout (Daytona's toolbox answers one stream): the
    // redirection is a line of its own, run before the command is parsed, so a syntax error in
    // the command is in the answer too.
    const r = await t.sandbox.exec([await t.sandbox.shell(), "-c", `exec 2>&1\n${b.command}`], {
      cwd: b.cwd ? t.resolve(b.cwd) : t.workDir,
      env: b.envs,
      user: t.user.name,
      timeoutMs: b.timeout ? b.timeout * 1000 : undefined,
      maxOutputBytes: MAX_OUTPUT,
    });
    if (r.timedOut) throw timedOut(b.timeout ?? 0);
    return { exitCode: r.exitCode, result: r.stdout };
  });

  app.post("/process/code-run", { schema: { body: CodeRunBody, hide: true } }, async (req: FastifyRequest<{ Body: Static<typeof CodeRunBody> }>) => {
    const t = await toolboxOf(forge, req);
    const b = req.body;
    const language = (b.language ?? "python").toLowerCase();
    const runner = RUNNERS[language];
    if (!runner) throw badRequest(`language: "${b.language}" is not run here; use python or javascript`);
    const r = await t.sandbox.exec(["/bin/sh", "-c", 'exec 2>&1; exec "$@"', "sh", ...runner, ...(b.argv ?? [])], {
      cwd: t.workDir,
      env: b.envs,
      user: t.user.name,
      stdin: b.code,
      timeoutMs: b.timeout ? b.timeout * 1000 : undefined,
      maxOutputBytes: MAX_OUTPUT,
    });
    if (r.timedOut) throw timedOut(b.timeout ?? 0);
    return { exitCode: r.exitCode, result: r.stdout, artifacts: { stdout: r.stdout, charts: [] } };
  });
}
