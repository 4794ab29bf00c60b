// Allowlist parsing and matching, and the blocked address ranges (no VM needed).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { blockedAddresses } from "../../src/net/addresses.js";
import { AllowlistError, loadPresets, matchAddress, matchHost, parseAllowlist } from "../../src/net/allowlist.js";
import { parsePortSpec } from "../../src/net/ports.js";

const presets = loadPresets();

describe("allowlist", () => {
  it("matches hostnames exactly, wildcards on a label boundary, and ports 80/443 unless given", () => {
    const rules = parseAllowlist(["pypi.org", "*.example.com", "api.test:8443", "any.test:*"], presets);
    assert.ok(matchHost(rules, "pypi.org", 443));
    assert.ok(matchHost(rules, "pypi.org", 80));
    assert.equal(matchHost(rules, "pypi.org", 22), null);
    assert.equal(matchHost(rules, "pypi.org.evil.com", 443), null);
    assert.equal(matchHost(rules, "evilpypi.org", 443), null);
    assert.ok(matchHost(rules, "a.example.com", 443));
    assert.ok(matchHost(rules, "a.b.example.com", 443));
    assert.equal(matchHost(rules, "example.com", 443), null);
    assert.equal(matchHost(rules, "badexample.com", 443), null);
    assert.ok(matchHost(rules, "api.test", 8443));
    assert.equal(matchHost(rules, "api.test", 443), null);
    assert.ok(matchHost(rules, "any.test", 5432));
  });

  it("expands presets, and refuses unknown presets and malformed entries by name", () => {
    const rules = parseAllowlist(["@pypi", "@github"], presets);
    assert.ok(matchHost(rules, "files.pythonhosted.org", 443));
    assert.ok(matchHost(rules, "raw.githubusercontent.com", 443));
    assert.match(matchHost(rules, "pypi.org", 443)!.entry, /^@pypi/);
    for (const name of ["@pypi", "@npm", "@github", "@debian", "@ubuntu", "@alpine", "@crates", "@golang", "@rubygems", "@maven", "@huggingface", "@anthropic", "@openai"]) {
      assert.ok(presets[name]?.length, name);
      parseAllowlist([name], presets);
    }
    for (const bad of ["@nope", "*.com", "a b", "x.org:0", "x.org:65536", "10.0.0.0/33", "-bad.org", "exa_mple.org"]) {
      assert.throws(() => parseAllowlist([bad], presets), AllowlistError, bad);
    }
  });

  it("matches IP literals only against address entries", () => {
    const rules = parseAllowlist(["203.0.113.0/24:443", "[2001:db8::1]:443", "pypi.org"], presets);
    assert.ok(matchAddress(rules, "203.0.113.9", 443));
    assert.equal(matchAddress(rules, "203.0.113.9", 80), null);
    assert.equal(matchAddress(rules, "198.51.100.1", 443), null);
    assert.ok(matchAddress(rules, "2001:db8::1", 443));
    assert.equal(matchAddress(rules, "151.101.0.223", 443), null); // pypi.org's address is not "pypi.org"
  });
});

describe("blocked addresses", () => {
  it("covers loopback, private, link-local, metadata, CGNAT, ULA, mapped and NAT64 forms; not public ones", () => {
    const b = blockedAddresses();
    for (const ip of [
      "127.0.0.1",
      "127.8.9.10",
      "10.1.2.3",
      "172.16.0.1",
      "172.31.255.255",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "0.0.0.0",
      "::1",
      "::",
      "fd00::1",
      "fe80::1",
      "::ffff:127.0.0.1",
      "::ffff:7f00:1",
      "0:0:0:0:0:ffff:10.0.0.1",
      "::127.0.0.1",
      "64:ff9b::a00:1",
      "224.0.0.1",
      "255.255.255.255",
    ]) {
      assert.equal(b.has(ip), true, ip);
    }
    for (const ip of ["93.184.216.34", "151.101.0.223", "172.32.0.1", "2606:4700::1111"]) assert.equal(b.has(ip), false, ip);
  });

  it("parses published port specs", () => {
    assert.deepEqual(parsePortSpec("8080:80"), { host_ip: "127.0.0.1", host_port: 8080, guest_port: 80 });
    assert.deepEqual(parsePortSpec("0.0.0.0:8080:80"), { host_ip: "0.0.0.0", host_port: 8080, guest_port: 80 });
    assert.deepEqual(parsePortSpec("80"), { host_ip: "127.0.0.1", host_port: 80, guest_port: 80 });
    for (const bad of ["", "a:b", "1:2:3", "8080:0", "70000:80", "999.1.1.1:80:80"]) assert.throws(() => parsePortSpec(bad), bad);
  });
});
