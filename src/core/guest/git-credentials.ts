// The host's side of git credential forwarding (docs/security.md, "Credential forwarding"). The
// guest's helper (agent/helpers/git-credential.c) sends what git asked it: an action line, then git's
// `key=value` attributes. Only `get` is answered, only for http(s), and only for a host the
// sandbox's egress lets it reach; the answer comes from the server's user's own
// `git credential fill`, never prompting, and carries the username and password only. A guest
// can never store or erase anything in the host's credential helpers.
import { spawn } from "node:child_process";
import { ignore } from "../../util/ignore.js";

/** Whether the sandbox's egress lets it reach `host` on `port` (Networks.allowsHost). */
export type EgressAllows = (host: string, port: number) => boolean;
/** Runs the host's `git credential fill` on a request; its output, or "" when it knows nothing. */
export type CredentialFill = (request: string) => Promise<string>;

/** The largest request a guest may send: git's are a few hundred bytes. */
export const MAX_REQUEST = 64 * 1024;

/** What a request for a credential carries to the host's helpers; anything else is dropped. */
const ASKED = ["protocol", "host", "path", "username"] as const;
const DEFAULT_PORT: Record<string, number> = { https: 443, http: 80 };

/** Parses `key=value` lines; null for anything that is not one. */
function attributes(text: string): Map<string, string> | null {
  const out = new Map<string, string>();
  for (const line of text.split("\n")) {
    if (!line) continue;
    const eq = line.indexOf("=");
    if (eq <= 0) return null;
    out.set(line.slice(0, eq), line.slice(eq + 1));
  }
  return out;
}

/**
 * The answer to one request from a guest: the credential's lines, or "" (git then tries its
 * other helpers, or fails without one). `refused` says why nothing was given, for the server's log.
 */
export async function answerGitCredential(request: string, allows: EgressAllows, fill: CredentialFill): Promise<{ answer: string; refused?: string }> {
  const a = attributes(request);
  if (!a) return { answer: "", refused: "a request that is not git's key=value lines" };
  if (a.get("action") !== "get") return { answer: "" };
  const protocol = a.get("protocol") ?? "";
  const hostPort = a.get("host") ?? "";
  if (!(protocol in DEFAULT_PORT)) return { answer: "", refused: `protocol ${JSON.stringify(protocol)}: only http and https credentials are forwarded` };
  const m = /^([A-Za-z0-9.-]+)(?::(\d{1,5}))?$/.exec(hostPort);
  if (!m) return { answer: "", refused: `host ${JSON.stringify(hostPort)} is not a host name` };
  const host = m[1].toLowerCase();
  const port = m[2] ? Number(m[2]) : DEFAULT_PORT[protocol];
  if (!allows(host, port)) return { answer: "", refused: `${host}:${port} is not a destination this sandbox's egress allows` };
  const asked = ASKED.filter((k) => a.has(k)).map((k) => `${k}=${a.get(k)}\n`);
  const filled = attributes(await fill(`${asked.join("")}\n`));
  const username = filled?.get("username");
  const password = filled?.get("password");
  if (!username || password === undefined) return { answer: "", refused: `the host's git credential helpers know no credential for ${hostPort}` };
  return { answer: `protocol=${protocol}\nhost=${hostPort}\nusername=${username}\npassword=${password}\n` };
}

/**
 * The server's user's `git credential fill`: its helpers as that user configured them, with
 * every prompt off (a terminal's, and askpass programs'), and a time limit.
 */
export function hostCredentialFill(timeoutMs = 10_000): CredentialFill {
  return (request) =>
    new Promise((resolve) => {
      const env: NodeJS.ProcessEnv = { ...process.env, GIT_TERMINAL_PROMPT: "0" };
      delete env.GIT_ASKPASS;
      delete env.SSH_ASKPASS;
      const p = spawn("git", ["-c", "credential.interactive=false", "credential", "fill"], { env, stdio: ["pipe", "pipe", "ignore"], timeout: timeoutMs });
      let out = "";
      p.stdout.setEncoding("utf8").on("data", (d: string) => {
        if (out.length < MAX_REQUEST) out += d;
      });
      p.on("error", () => resolve(""));
      p.on("close", (code) => resolve(code === 0 ? out : ""));
      p.stdin.on("error", ignore("git exited before reading the request: its exit says what it knew"));
      p.stdin.end(request);
    });
}
