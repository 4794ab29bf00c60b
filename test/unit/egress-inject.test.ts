// Egress rules over real sockets and real TLS (no VM: what a guest sends arrives as bytes on a
// stream either way): the proxy adds a rule's headers, with its secrets filled in, to requests for
// that destination only, over plain HTTP and over HTTPS it terminates with its own CA; and never
// for a forged server name, a Host that is not the destination, or a request smuggled after the first.
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { mkdtemp, readFile, readdir, rm, stat } from "node:fs/promises";
import { createServer as createHttpServer, type IncomingMessage } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Duplex } from "node:stream";
import { after, before, describe, it } from "node:test";
import { connect as tlsConnect, type PeerCertificate } from "node:tls";
import { loadPresets, parseAllowlist } from "../../src/net/allowlist.js";
import { EgressCa } from "../../src/net/egress-ca.js";
import { EgressProxy } from "../../src/net/egress-proxy.js";
import { checkRules, outsideAllowlist, parseValue, RuleError, ruleFor } from "../../src/net/egress-rules.js";

const SECRET = "sk-test-7f3a9c0e1d2b";
let dir: string;
let proxy: EgressProxy;
let proxyCa: EgressCa;
let upstreamLeaf: (host: string) => Promise<{ cert: string }>;
let front: Server;
let frontPort: number;
let httpsPort: number;
let httpPort: number;
const seen: { host: string | undefined; auth: string | undefined; path: string | undefined; tls: boolean }[] = [];
const servers: { close(): void }[] = [];

/** A guest's connection as the agent channel delivers it: a plain Duplex, not a socket. */
function asDuplex(s: Socket): Duplex {
  const d = new Duplex({
    read() {
      s.resume();
    },
    write(chunk, _enc, cb) {
      s.write(chunk, cb);
    },
    final(cb) {
      s.end();
      cb();
    },
    destroy(err, cb) {
      s.destroy();
      cb(err);
    },
  });
  s.on("data", (c) => {
    if (!d.push(c)) s.pause();
  });
  s.on("end", () => d.push(null));
  s.on("close", () => d.destroy());
  s.on("error", () => d.destroy());
  return d;
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "forgevm-inject-"));
  // The destinations' own CA, which the proxy is told to trust as an operator's private CA.
  const upstreamCa = new EgressCa(join(dir, "upstream-ca"));
  upstreamLeaf = (h) => upstreamCa.leaf(h);
  const record = (req: IncomingMessage, tls: boolean) => seen.push({ host: req.headers.host, auth: req.headers.authorization, path: req.url, tls });
  const leaf = await upstreamCa.leaf("api.test");
  const https = createHttpsServer(
    {
      cert: leaf.cert,
      key: leaf.key,
      SNICallback: async (name, cb) => {
        const l = await upstreamCa.leaf(name);
        const { createSecureContext } = await import("node:tls");
        cb(null, createSecureContext({ cert: l.cert, key: l.key }));
      },
    },
    (req, res) => {
      record(req, true);
      req.resume();
      res.end(`hello from ${req.headers.host}`);
    },
  );
  await new Promise<void>((r) => https.listen(0, "127.0.0.1", r));
  httpsPort = (https.address() as { port: number }).port;
  const http = createHttpServer((req, res) => {
    record(req, false);
    req.resume();
    res.end("plain hello");
  });
  await new Promise<void>((r) => http.listen(0, "127.0.0.1", r));
  httpPort = (http.address() as { port: number }).port;
  servers.push(https, http);
  proxyCa = new EgressCa(join(dir, "egress-ca"));
  proxy = new EgressProxy({
    logDir: join(dir, "egress"),
    allowPrivate: ["127.0.0.1"],
    resolve: async () => ["127.0.0.1"],
    ca: proxyCa,
    upstreamCa: await upstreamCa.certPem(),
    secret: async (name) => (name === "openai-key" ? SECRET : undefined),
  });
  proxy.setPolicy("sb-test", parseAllowlist([`api.test:${httpsPort}`, `other.test:${httpsPort}`, `plain.test:${httpPort}`, `gone.test:${httpsPort}`], loadPresets()));
  proxy.setRules(
    "sb-test",
    checkRules(
      {
        "api.test": { headers: { Authorization: "Bearer {{OPENAI-KEY}}" } },
        // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder syntax, written as a guest's rule writes it
        "plain.test": { headers: { Authorization: "Bearer ${e2b.secrets.openai-key}" } },
        "gone.test": { headers: { "X-Key": "{{no-such-secret}}" } },
      },
      "rules",
    ),
  );
  front = createServer((s) => proxy.handle("sb-test", asDuplex(s)));
  await new Promise<void>((r) => front.listen(0, "127.0.0.1", r));
  frontPort = (front.address() as { port: number }).port;
});

after(async () => {
  proxy.close();
  front.close();
  for (const s of servers) s.close();
  await rm(dir, { recursive: true, force: true });
});

/** Opens a CONNECT tunnel through the proxy; resolves with the socket once it is established. */
function tunnel(target: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(frontPort, "127.0.0.1", () => s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
    let got = "";
    const onData = (c: Buffer) => {
      got += c.toString("latin1");
      if (got.includes("\r\n\r\n")) {
        s.off("data", onData);
        if (/^HTTP\/1\.1 200/.test(got)) resolve(s);
        else reject(new Error(got));
      }
    };
    s.on("data", onData);
    s.on("error", reject);
  });
}

/** TLS through a tunnel; the raw request is written as given, and everything answered is returned with the peer's certificate. */
async function overTls(target: string, servername: string, ca: string[], raw: string): Promise<{ answer: string; cert?: PeerCertificate; error?: string }> {
  const s = await tunnel(target);
  return new Promise((resolve) => {
    const t = tlsConnect({ socket: s, servername, ca, ALPNProtocols: ["http/1.1"] }, () => t.write(raw));
    let answer = "";
    let cert: PeerCertificate | undefined;
    t.on("secureConnect", () => (cert = t.getPeerCertificate()));
    t.on("data", (c) => (answer += c.toString("latin1")));
    t.on("close", () => resolve({ answer, cert }));
    t.on("error", (e) => resolve({ answer, cert, error: e.message }));
    t.setTimeout(10_000, () => t.destroy());
  });
}

function send(raw: string): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(frontPort, "127.0.0.1", () => s.write(raw));
    let out = "";
    s.on("data", (d) => (out += d.toString("latin1")));
    s.on("close", () => resolve(out));
    s.on("error", () => resolve(out));
    s.setTimeout(10_000, () => s.destroy());
  });
}

describe("egress rules", () => {
  it("adds the rule's header, its secret filled in, to an HTTPS request for that destination, over TLS from the server's CA", async () => {
    const before = seen.length;
    const r = await overTls(
      `api.test:${httpsPort}`,
      "api.test",
      [await proxyCa.certPem()],
      `GET /v1/models HTTP/1.1\r\nHost: api.test:${httpsPort}\r\nAuthorization: Bearer guest-placeholder\r\n\r\n`,
    );
    assert.equal(r.error, undefined);
    assert.match(r.answer, /^HTTP\/1\.1 200[\s\S]*hello from api\.test/);
    assert.match(String(r.cert!.issuer.CN), /ForgeVM egress CA/);
    assert.equal(r.cert!.fingerprint256, new X509Certificate((await proxyCa.leaf("api.test")).cert).fingerprint256, "the proxy's certificate for api.test");
    assert.deepEqual(seen.slice(before), [{ host: `api.test:${httpsPort}`, auth: `Bearer ${SECRET}`, path: "/v1/models", tls: true }], "replaced, not added twice");
  });

  it("passes a destination without a rule through unread: the guest sees the real host's certificate, and no header is added", async () => {
    const before = seen.length;
    const r = await overTls(`other.test:${httpsPort}`, "other.test", [await proxyCa.certPem()], `GET / HTTP/1.1\r\nHost: other.test\r\n\r\n`);
    assert.ok(r.error, "the proxy's CA does not vouch for a host without a rule");
    assert.match(r.error!, /self.signed|unable to verify|certificate/i);
    assert.equal(seen.length, before);
    const upstreamCaPem = await readFile(join(dir, "upstream-ca", "ca.crt"), "utf8");
    const r2 = await overTls(`other.test:${httpsPort}`, "other.test", [upstreamCaPem], `GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n`);
    assert.equal(r2.error, undefined);
    assert.equal(r2.cert!.fingerprint256, new X509Certificate((await upstreamLeaf("other.test")).cert).fingerprint256, "the destination's own certificate");
    assert.deepEqual(seen.slice(before), [{ host: "other.test", auth: undefined, path: "/", tls: true }]);
  });

  it("a forged server name gets no certificate at all, and nothing reaches the destination", async () => {
    const before = seen.length;
    const r = await overTls(`api.test:${httpsPort}`, "other.test", [await proxyCa.certPem()], `GET / HTTP/1.1\r\nHost: other.test\r\n\r\n`);
    assert.ok(r.error);
    assert.equal(r.cert, undefined);
    assert.equal(seen.length, before);
    const log = await proxy.entries("sb-test", 50);
    assert.ok(log.some((e) => e.decision === "deny" && /server name "other\.test" is not the CONNECT target/.test(e.reason)));
  });

  it("a Host that is not the tunnel's destination is a 421, and nothing is sent", async () => {
    const before = seen.length;
    const r = await overTls(`api.test:${httpsPort}`, "api.test", [await proxyCa.certPem()], `GET / HTTP/1.1\r\nHost: other.test\r\n\r\n`);
    assert.match(r.answer, /^HTTP\/1\.1 421/);
    const two = await overTls(`api.test:${httpsPort}`, "api.test", [await proxyCa.certPem()], `GET / HTTP/1.1\r\nHost: api.test\r\nHost: other.test\r\n\r\n`);
    assert.match(two.answer, /^HTTP\/1\.1 421/, "two Host headers");
    const abs = await overTls(`api.test:${httpsPort}`, "api.test", [await proxyCa.certPem()], `GET https://other.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n`);
    assert.match(abs.answer, /^HTTP\/1\.1 421/, "an absolute URL naming another host");
    assert.equal(seen.length, before);
  });

  it("a request smuggled after the first on a kept-alive connection never carries the secret to another host", async () => {
    const before = seen.length;
    const r = await overTls(
      `api.test:${httpsPort}`,
      "api.test",
      [await proxyCa.certPem()],
      `GET /first HTTP/1.1\r\nHost: api.test\r\nConnection: keep-alive\r\n\r\nGET /second HTTP/1.1\r\nHost: other.test\r\n\r\n`,
    );
    assert.match(r.answer, /^HTTP\/1\.1 200/);
    const got = seen.slice(before);
    assert.equal(got[0].path, "/first");
    assert.equal(got[0].auth, `Bearer ${SECRET}`);
    for (const g of got.slice(1)) assert.notEqual(g.auth, `Bearer ${SECRET}`, `the request for ${g.path} got the secret`);
    assert.ok(got.every((g) => g.auth !== `Bearer ${SECRET}` || g.host === "api.test"));
  });

  it("adds the header to a plain-HTTP request for that destination, and refuses one whose Host is another", async () => {
    const before = seen.length;
    const ok = await send(`GET http://plain.test:${httpPort}/x HTTP/1.1\r\nHost: plain.test:${httpPort}\r\n\r\n`);
    assert.match(ok, /^HTTP\/1\.1 200[\s\S]*plain hello/);
    assert.deepEqual(seen.slice(before), [{ host: `plain.test:${httpPort}`, auth: `Bearer ${SECRET}`, path: "/x", tls: false }]);
    const bad = await send(`GET http://plain.test:${httpPort}/x HTTP/1.1\r\nHost: other.test\r\n\r\n`);
    assert.match(bad, /^HTTP\/1\.1 421/);
    assert.equal(seen.length, before + 1);
  });

  it("a rule naming a secret that does not exist fails its request with a 502 saying so, and sends nothing", async () => {
    const before = seen.length;
    const r = await overTls(`gone.test:${httpsPort}`, "gone.test", [await proxyCa.certPem()], `GET / HTTP/1.1\r\nHost: gone.test\r\n\r\n`);
    assert.match(r.answer, /^HTTP\/1\.1 502[\s\S]*"no-such-secret" a rule names does not exist/);
    assert.equal(seen.length, before);
  });

  it("the egress log names the rule and the headers it added, never a value", async () => {
    const log = await proxy.entries("sb-test", 100);
    assert.ok(log.some((e) => e.injected === "api.test" && e.headers?.join() === "Authorization"));
    assert.ok(log.some((e) => e.injected === "plain.test"));
    for (const f of await readdir(join(dir, "egress"))) assert.doesNotMatch(await readFile(join(dir, "egress", f), "utf8"), new RegExp(SECRET));
  });

  it("the CA's key is readable by the server's user alone, and one made once is kept", async () => {
    assert.equal((await stat(join(dir, "egress-ca", "ca.key"))).mode & 0o777, 0o600);
    assert.equal((await stat(join(dir, "egress-ca"))).mode & 0o777, 0o700);
    const again = new EgressCa(join(dir, "egress-ca"));
    assert.equal(await again.certPem(), await proxyCa.certPem());
  });
});

describe("egress rule syntax", () => {
  it("parses both placeholder forms, several to a value, and matches exact hosts before the longest wildcard", () => {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder syntax, written as a guest's rule writes it
    assert.deepEqual(parseValue("a {{X}} b ${e2b.secrets.Y-z}", "f"), [{ text: "a " }, { secret: "x" }, { text: " b " }, { secret: "y-z" }]);
    const rules = checkRules({ "*.example.com": { headers: { A: "1" } }, "*.api.example.com": { headers: { A: "2" } }, "x.api.example.com": { headers: { A: "3" } } }, "r");
    assert.equal(ruleFor(rules, "x.api.example.com")?.headers.A, "3");
    assert.equal(ruleFor(rules, "y.api.example.com")?.headers.A, "2");
    assert.equal(ruleFor(rules, "z.example.com")?.headers.A, "1");
    assert.equal(ruleFor(rules, "example.com"), null, "*.example.com does not match example.com");
  });

  it("refuses malformed rules, naming the field", () => {
    const bad: [unknown, RegExp][] = [
      [{ "*": { headers: {} } }, /bare \* is not allowed/],
      [{ "bad_host!": { headers: {} } }, /not a hostname/],
      // A request to an address never meets a rule (the proxy matches names): refused, not stored and ignored.
      [{ "127.0.0.1": { headers: { A: "1" } } }, /"127\.0\.0\.1" is an IP address; rules apply to host names/],
      [{ "[::1]": { headers: { A: "1" } } }, /not a hostname/],
      [{ "a.test": { headers: { "Bad Name": "x" } } }, /r\.a\.test\.headers: "Bad Name" is not a header name/],
      [{ "a.test": { headers: { Host: "x" } } }, /Host: this header frames the request/],
      [{ "a.test": { headers: { "Content-Length": "1" } } }, /frames the request/],
      [{ "a.test": { headers: { A: "x\r\nB: y" } } }, /no control characters/],
      [{ "a.test": { headers: { A: "{{X" } } }, /malformed secret placeholder/],
      // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder syntax, written as a guest's rule writes it
      [{ "a.test": { headers: { A: "${e2b.secrets.}" } } }, /is not a secret's name/],
      // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder syntax, written as a guest's rule writes it
      [{ "a.test": { headers: { A: "${e2b.identity.tokens.aws}" } } }, /workload identity/],
      [{ "a.test": { headers: { A: "{{a{{b}}}}" } } }, /malformed/],
      [{ "a.test": { headers: {}, extra: 1 } }, /unknown field "extra"/],
      [Object.fromEntries(Array.from({ length: 11 }, (_, i) => [`h${i}.test`, { headers: {} }])), /at most 10 destinations/],
      [{ "a.test": { headers: Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`H${i}`, "v"])) } }, /at most 20 headers/],
      [{ "a.test": { headers: { A: "x".repeat(2049) } } }, /at most 2048 characters/],
      [[], /must be an object/],
    ];
    for (const [raw, re] of bad)
      assert.throws(
        () => checkRules(raw, "r"),
        (e: Error) => e instanceof RuleError && re.test(e.message),
        JSON.stringify(raw).slice(0, 80),
      );
  });

  it("finds the destinations a sandbox's allowlist does not reach", () => {
    const allow = parseAllowlist(["api.test", "*.example.com"], loadPresets());
    assert.deepEqual(
      outsideAllowlist(checkRules({ "api.test": { headers: {} }, "x.example.com": { headers: {} }, "*.y.example.com": { headers: {} }, "evil.test": { headers: {} } }, "r"), allow),
      ["evil.test"],
    );
  });
});
