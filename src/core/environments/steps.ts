// An environment spec as a Dockerfile for the builder, and the network its steps need: the
// Debian packages with apt-get (from the image's own sources, or the operator's), then the
// Python packages with pip in the image's Python or the one the spec names. An image without pip
// gets it for the step only: a small stdlib script fetches pip's wheel from the same index and
// runs pip from it, so nothing but the asked-for packages is installed.
import { shellQuote } from "../../util/shell-quote.js";
import type { CleanSpec } from "./spec.js";

/** Where packages come from (the `environments` section of the config). */
export interface PackageSources {
  /** A PEP 503 "simple" index. */
  pythonIndex: string;
  /** sources.list lines used instead of the image's own; empty: the image's own (Debian's and Ubuntu's archives). */
  aptSources: string[];
  /** More allowlist entries for build steps (e.g. a mirror a package's build fetches from). */
  allow: string[];
}

export const PYPI_SIMPLE = "https://pypi.org/simple/";

// Kept in the image only while the step runs: passed with -c, base64 so no shell sees it.
const PIP_RUNNER = `import hashlib, html, os, re, subprocess, sys, urllib.parse, urllib.request
py, index, pkgs = sys.argv[1], sys.argv[2], sys.argv[3:]
env = dict(os.environ, PIP_BREAK_SYSTEM_PACKAGES="1", PIP_ROOT_USER_ACTION="ignore", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1", PIP_PROGRESS_BAR="off")
pip, tmp = [py, "-m", "pip"], None
if subprocess.run(pip + ["--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env).returncode != 0:
    page = urllib.parse.urljoin(index.rstrip("/") + "/", "pip/")
    wheels = []
    for link in re.findall(r'href="([^"]+)"', urllib.request.urlopen(page, timeout=120).read().decode("utf-8", "replace")):
        url = urllib.parse.urljoin(page, html.unescape(link))
        m = re.match(r"pip-(\\d+(?:\\.\\d+)*)-py3-none-any\\.whl$", urllib.parse.urlparse(url).path.rsplit("/", 1)[-1])
        if m:
            wheels.append((tuple(int(x) for x in m.group(1).split(".")), url))
    if not wheels:
        sys.exit("the image has no pip, and " + page + " offers no pip wheel")
    url = max(wheels)[1]
    data = urllib.request.urlopen(url, timeout=600).read()
    want = urllib.parse.urlparse(url).fragment
    if want.startswith("sha256=") and hashlib.sha256(data).hexdigest() != want[7:]:
        sys.exit("the pip wheel from " + url + " does not match its sha256")
    tmp = "/tmp/forgevm-pip.whl"
    with open(tmp, "wb") as f:
        f.write(data)
    pip = [py, tmp + "/pip"]
    print("the image has no pip: running pip from " + url.split("#")[0], flush=True)
u = urllib.parse.urlparse(index)
args = ["install", "--index-url", index] + (["--trusted-host", u.hostname] if u.scheme == "http" else []) + pkgs
code = subprocess.run(pip + args, env=env).returncode
if tmp:
    os.remove(tmp)
sys.exit(code)
`;

/** The allowlist entry for a URL's host: "host" for the default ports, else "host:port". */
function hostEntry(url: string): string | null {
  try {
    const u = new URL(url);
    return u.port ? `${u.hostname}:${u.port}` : u.hostname;
  } catch {
    return null;
  }
}

/** The URLs of sources.list lines ("deb [opts] URL suite [components]"). */
function sourceUrls(lines: string[]): string[] {
  return lines.flatMap((l) => {
    const m = /^\s*deb(?:-src)?\s+(?:\[[^\]]*\]\s+)?(\S+)/.exec(l);
    return m ? [m[1]] : [];
  });
}

/** The Dockerfile of a spec, and the allowlist its steps need. */
export function environmentDockerfile(spec: CleanSpec, sources: PackageSources): { dockerfile: string; allow: string[] } {
  const lines = [`FROM ${spec.base_image}`];
  const allow = new Set<string>();
  if (spec.apt_packages.length) {
    const pkgs = spec.apt_packages.map(shellQuote).join(" ");
    const apt = (opts: string) => `apt-get ${opts}update && DEBIAN_FRONTEND=noninteractive apt-get ${opts}install -y --no-install-recommends ${pkgs}`;
    if (sources.aptSources.length) {
      const list = "/etc/apt/forgevm-build.list";
      const write = `printf '%s\\n' ${sources.aptSources.map(shellQuote).join(" ")} > ${list}`;
      lines.push(`RUN ${write} && ${apt(`-o Dir::Etc::SourceList=${list} -o Dir::Etc::SourceParts=- `)} && rm -f ${list} && apt-get clean && rm -rf /var/lib/apt/lists/*`);
      for (const u of sourceUrls(sources.aptSources)) {
        const e = hostEntry(u);
        if (e) allow.add(e);
      }
    } else {
      lines.push(`RUN ${apt("")} && apt-get clean && rm -rf /var/lib/apt/lists/*`);
      allow.add("@debian").add("@ubuntu");
    }
  }
  const py = spec.python_version ? `python${spec.python_version}` : "python3";
  if (spec.python_version || spec.python_packages.length) {
    const missing = `echo ${shellQuote(`${py} is not in ${spec.base_image}${spec.python_version ? ": python_version must be a Python the image has" : ""}`)} >&2`;
    const check = `command -v ${py} >/dev/null || { ${missing}; exit 1; }`;
    if (!spec.python_packages.length) lines.push(`RUN ${check}`);
    else {
      const runner = Buffer.from(PIP_RUNNER).toString("base64");
      const args = [py, sources.pythonIndex, ...spec.python_packages].map(shellQuote).join(" ");
      lines.push(`RUN ${check} && ${py} -c 'import base64; exec(base64.b64decode("${runner}"))' ${args}`);
      const e = sources.pythonIndex === PYPI_SIMPLE ? "@pypi" : hostEntry(sources.pythonIndex);
      if (e) allow.add(e);
    }
  }
  for (const a of sources.allow) allow.add(a);
  return { dockerfile: `${lines.join("\n")}\n`, allow: [...allow] };
}
