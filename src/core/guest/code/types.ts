// What running code produces, in the words every interface uses (E2B's code interpreter, our
// REST API, the CLI and the SDKs): events while it runs, an Execution when it is done.

/** Where the runtimes live in the guest (written there by the host on first use). */
export const RUNTIME_DIR = "/opt/forgevm/runtime";

export type CodeLanguage = "python" | "javascript" | "bash";

const LANGUAGES: Record<string, CodeLanguage> = {
  python: "python",
  python3: "python",
  py: "python",
  javascript: "javascript",
  js: "javascript",
  typescript: "javascript",
  ts: "javascript",
  node: "javascript",
  bash: "bash",
  sh: "bash",
  shell: "bash",
};

/** The runtime a language name asks for (default python); 400 for one we do not run. */
export function parseLanguage(name: string | undefined): CodeLanguage | null {
  if (name === undefined || name === "") return null;
  return LANGUAGES[name.toLowerCase()] ?? null;
}

export const LANGUAGE_NAMES = Object.keys(LANGUAGES);

/** One result: the value of the code's last expression (is_main_result), or a figure it drew. */
export interface CodeResult {
  is_main_result: boolean;
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  /** Base64 PNG. */
  png?: string;
  jpeg?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
}

export interface CodeError {
  name: string;
  value: string;
  traceback: string;
}

export type CodeEvent =
  | { type: "stdout"; text: string }
  | { type: "stderr"; text: string }
  | ({ type: "result" } & CodeResult)
  | ({ type: "error" } & CodeError)
  | { type: "number_of_executions"; execution_count: number };

/** A finished execution. */
export interface Execution {
  results: CodeResult[];
  stdout: string[];
  stderr: string[];
  error: CodeError | null;
  executionCount: number;
}

/** A code context as every interface lists it. */
export interface CodeContextInfo {
  id: string;
  language: CodeLanguage;
  cwd: string;
  user: string | null;
}
