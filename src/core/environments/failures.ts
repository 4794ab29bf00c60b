// Why an environment build's package step failed, in one line with the setting to change. The
// step's own output (pip's traceback, apt's "Failed to fetch") names the cause somewhere in
// dozens of lines; offline or with an index on this host, that cause is almost always the
// package source being out of reach, which is the operator's to fix in the config.
import type { PackageSources } from "./steps.js";

/** What a step's output says went wrong fetching, if it says so. */
function fetchProblem(lines: string[]): string | null {
  const text = lines.join("\n");
  if (/Tunnel connection failed: 403|403 Forbidden|HTTP Error 403|ProxyError\(.*403/i.test(text)) return "the build's egress proxy refused it";
  if (/Connection refused|\[Errno 111\]/.test(text)) return "connection refused";
  if (/Temporary failure in name resolution|Name or service not known|Could not resolve|No address associated/i.test(text)) return "its name does not resolve";
  if (/timed out|Network is unreachable|No route to host/i.test(text)) return "it did not answer";
  return null;
}

/** Whether a URL's host is this machine or a private network. */
function localHost(url: string): boolean {
  try {
    const h = new URL(url).hostname;
    return h === "localhost" || /^(127\.|10\.|192\.168\.|172\.(1[6-9]|2\d|3[01])\.|\[?::1\]?$)/.test(h);
  } catch {
    return false;
  }
}

const HOST_HINT = "; an index on this host is reached at the host's own address (not 127.0.0.1, which is the build VM itself), and that address must be in network.allow_private";

/** One line for a failed package step (`apt` or `pip`), from its output; null when the output names no fetching problem. */
export function explainPackageFailure(kind: "apt" | "pip", lines: string[], sources: PackageSources): string | null {
  const problem = fetchProblem(lines);
  if (kind === "pip") {
    const missing = /No matching distribution found for (\S+)/.exec(lines.join("\n"))?.[1];
    if (!problem && missing)
      return `the Python package index ${sources.pythonIndex} has no ${missing}: check the name and version, or set environments.python_index to an index that has it`;
    if (!problem) return null;
    const local = localHost(sources.pythonIndex) || problem.startsWith("the build's egress proxy");
    return `the Python package index ${sources.pythonIndex} cannot be reached from the build (${problem}): set environments.python_index to an index this server can reach${local ? HOST_HINT : ""}`;
  }
  const missing = /Unable to locate package (\S+)/.exec(lines.join("\n"))?.[1];
  if (!problem && missing) return `no apt source of the build has ${missing}: check the name, or set environments.apt_sources to a mirror that has it`;
  if (!problem && !/Failed to fetch|Could not connect/.test(lines.join("\n"))) return null;
  const where = sources.aptSources.length ? "environments.apt_sources" : "the image's own apt sources (Debian's and Ubuntu's archives)";
  return `the apt sources cannot be reached from the build (${problem ?? "fetching failed"}; ${where}): set environments.apt_sources to a mirror this server can reach${sources.aptSources.some(localHost) ? HOST_HINT.replace("an index", "a mirror") : ""}`;
}
