// The parts of the MCP server that decide without a VM: how an agent's network request is
// narrowed to the operator's pin, what the audit log keeps of arguments, and output capping.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { loadPresets, outside, parseAllowlist } from "../../src/net/allowlist.js";
import { redactArguments } from "../../src/interfaces/mcp/audit.js";
import { HeadTail } from "../../src/interfaces/mcp/head-tail.js";
import { checkSize, narrowNetwork, type McpPolicy } from "../../src/interfaces/mcp/policy.js";

const presets = loadPresets();
const beyond = (asked: string[], pinned: string[]) => outside(parseAllowlist(asked, presets), parseAllowlist(pinned, presets));

function policy(p: Partial<McpPolicy>): McpPolicy {
  return {
    network: "full",
    allow: [],
    maxSandboxes: 10,
    maxSandboxesPerSession: 5,
    maxMemoryMb: 1024,
    maxVcpus: 2,
    maxTtlMs: 3_600_000,
    images: [],
    hostDirs: [],
    sessionIdleMs: 60_000,
    maxOutputBytes: 4096,
    maxReadBytes: 4096,
    ...p,
  };
}

describe("an allowlist within a pinned one", () => {
  it("allows the same hosts, subdomains of a wildcard, and narrower ports", () => {
    assert.deepEqual(beyond(["example.com", "a.b.pypi.org", "*.x.pypi.org", "example.com:443"], ["example.com", "*.pypi.org"]), []);
    assert.deepEqual(beyond(["203.0.113.7", "198.51.100.0/25"], ["203.0.113.0/24", "198.51.100.0/24:*"]), []);
  });

  it("names every entry that reaches further", () => {
    assert.deepEqual(beyond(["pypi.org", "*.example.com", "example.com:22", "example.com:*", "198.51.100.0/23"], ["*.pypi.org", "example.com", "198.51.100.0/24"]), [
      "pypi.org",
      "*.example.com",
      "example.com:22",
      "example.com:*",
      "198.51.100.0/23",
    ]);
  });

  it("expands presets on both sides", () => {
    const [name, entries] = Object.entries(presets)[0];
    assert.deepEqual(beyond([name], entries), []);
    assert.deepEqual(beyond(entries, [name]), []);
    assert.ok(beyond([name], ["example.com"]).length > 0);
  });
});

describe("narrowing a spawn's network", () => {
  const o = (a: string[], p: string[]) => beyond(a, p);
  it("gives the pin when nothing is asked, and the server default when nothing is pinned", () => {
    assert.deepEqual(narrowNetwork(policy({ network: "allowlist", allow: ["example.com"] }), {}, "none", o), { network: "allowlist", allow: ["example.com"] });
    assert.deepEqual(narrowNetwork(policy({ network: "none" }), {}, "full", o), { network: "none" });
    assert.deepEqual(narrowNetwork(policy({ network: "full" }), {}, "none", o), { network: "none" });
  });

  it("takes anything narrower and refuses anything wider, naming the rule", () => {
    const pinned = policy({ network: "allowlist", allow: ["*.example.com"] });
    assert.deepEqual(narrowNetwork(pinned, { network: "none" }, "none", o), { network: "none" });
    assert.deepEqual(narrowNetwork(pinned, { allow: ["api.example.com"] }, "none", o), { network: "allowlist", allow: ["api.example.com"] });
    assert.throws(() => narrowNetwork(pinned, { network: "full" }, "none", o), /mcp\.network/);
    assert.throws(() => narrowNetwork(pinned, { allow: ["example.com"] }, "none", o), /mcp\.allow.*"example\.com"/);
    assert.throws(() => narrowNetwork(policy({ network: "none" }), { network: "allowlist" }, "none", o), /mcp\.network/);
    assert.throws(() => narrowNetwork(pinned, { network: "sideways" }, "none", o), /network must be one of/);
  });

  it("checks sizes against the limits", () => {
    const p = policy({});
    checkSize(p, { memoryMb: 1024, vcpus: 2, ttlMs: 3_600_000 });
    assert.throws(() => checkSize(p, { memoryMb: 1025 }), /mcp\.max_memory_mb/);
    assert.throws(() => checkSize(p, { vcpus: 3 }), /mcp\.max_vcpus/);
    assert.throws(() => checkSize(p, { ttlMs: 3_600_001 }), /mcp\.max_ttl/);
  });
});

describe("the audit log's copy of arguments", () => {
  it("redacts secret names, credentials in strings and bulky contents", () => {
    const r = redactArguments(
      {
        command: "curl -H 'Authorization: Bearer abc123' https://u:pw@x.com/?api_key=zzz; export GITHUB_TOKEN=foo; echo keep",
        env: { A: "1", GITHUB_TOKEN: "x", DB_PASSWORD: "y" },
        content: "hello",
        password: "p",
      },
      ["content"],
    );
    assert.deepEqual(r, {
      command: "curl -H 'Authorization: Bearer [redacted]' https://u:[redacted]@x.com/?api_key=[redacted]; export GITHUB_TOKEN=[redacted]; echo keep",
      env: { A: "1", GITHUB_TOKEN: "[redacted]", DB_PASSWORD: "[redacted]" },
      content: "<5 bytes>",
      password: "[redacted]",
    });
    assert.match(String(redactArguments({ command: "x".repeat(5000) })?.command), /… \(5000 bytes\)$/);
  });
});

describe("head and tail of long output", () => {
  it("keeps both ends and counts what it dropped", () => {
    const h = new HeadTail(10);
    for (const c of ["abc", "defgh", "ijklmnop", "qrstuvwxyz"]) h.push(Buffer.from(c));
    assert.equal(h.total, 26);
    assert.equal(h.truncated, true);
    assert.equal(h.text(), "abcde\n… [16 bytes omitted] …\nvwxyz");
    const small = new HeadTail(10);
    small.push(Buffer.from("short"));
    assert.deepEqual([small.text(), small.truncated], ["short", false]);
  });
});
