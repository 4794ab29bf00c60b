// The agent channel against a scripted fake guest on a real unix socket: what the host does
// when the guest misbehaves, which a well-behaved agent cannot be made to do.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  AgentChannel,
  AgentError,
  ChannelClosedError,
  FrameDecoder,
  INITIAL_WINDOW,
  Kind,
  FIELD_FEATURES,
  OP_FEATURES,
  encodeFrame,
  encodeJson,
} from "../../src/agent-client/index.js";

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "fvm-chan-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Every feature a current agent advertises. */
const ALL_FEATURES = [...new Set([...Object.values(OP_FEATURES), ...Object.values(FIELD_FEATURES).flatMap((m) => Object.values(m)), "host-hello"])];

/** A fake guest: the handler sees each request and the guest socket; `hello` replaces its HELLO. */
async function pair(onRequest: (id: number, body: any, guest: Socket) => void, hello: object = {}): Promise<{ ch: AgentChannel; server: Server }> {
  const path = join(dir, `s${Math.random().toString(16).slice(2)}.sock`);
  const server = createServer((guest) => {
    const dec = new FrameDecoder();
    guest.on("data", (d) => {
      for (const f of dec.push(d)) if (f.kind === Kind.Request) onRequest(f.id, JSON.parse(f.payload.toString()), guest);
    });
    guest.on("error", () => {});
    guest.write(encodeJson(0, Kind.Hello, { ok: true, proto: 1, agent: "fake", pid: 1, features: ALL_FEATURES, ...hello }));
  });
  await new Promise<void>((r) => server.listen(path, r));
  const sock = createConnection(path);
  await new Promise((r) => sock.once("connect", r));
  const ch = new AgentChannel(sock);
  await ch.hello.catch(() => {});
  return { ch, server };
}

describe("version skew", () => {
  it("never sends an agent an operation or field whose feature its HELLO did not list", async () => {
    const seen: string[] = [];
    const { ch, server } = await pair(
      (id, b, g) => {
        seen.push(b.op);
        g.write(encodeJson(id, Kind.Response, { ok: true }));
      },
      { agent: "0.0.1", features: ["exec", "files", "configure"] },
    );
    await assert.rejects(ch.listen({ port: 80 }, () => {}).listening, (e: any) => e instanceof AgentError && e.code === "ENOTSUP" && /lacks "tcp".*setup\.sh/.test(e.message));
    await assert.rejects(ch.request<"configure">({ op: "configure", net: { addr: "10.0.2.15", netmask: "255.255.255.0", gateway: "10.0.2.2", dns: "10.0.2.3" } }), /lacks "nic"/);
    await ch.request<"configure">({ op: "configure", time_ms: 1 });
    await ch.request<"ping">({ op: "ping" });
    assert.deepEqual(seen, ["configure", "ping"], "only what the agent can do reached it");
    ch.close();
    server.close();
  });

  it("closes the channel of an agent that speaks another protocol version, saying what to do", async () => {
    const { ch, server } = await pair(() => {}, { proto: 2 });
    await assert.rejects(ch.hello, /speaks protocol 2 and this server 1: rebuild the initramfs/);
    assert.equal(ch.isOpen, false);
    server.close();
  });
});

describe("agent channel against a misbehaving guest", () => {
  it("maps error replies to AgentError with the guest's code", async () => {
    const { ch, server } = await pair((id, _b, g) => g.write(encodeJson(id, Kind.Response, { ok: false, error: { code: "ENOENT", message: "/x: No such file" } })));
    await assert.rejects(ch.request<"stat">({ op: "stat", path: "/x" }), (e: any) => e instanceof AgentError && e.code === "ENOENT");
    assert.ok(ch.isOpen);
    ch.close();
    server.close();
  });

  it("closes only this channel on an oversized frame and fails requests in flight", async () => {
    const { ch, server } = await pair((_id, _b, g) => {
      const h = Buffer.alloc(12);
      h.writeUInt32LE(0x7fffffff, 0);
      h.writeUInt8(Kind.Data, 8);
      g.write(h);
    });
    await assert.rejects(ch.request<"ping">({ op: "ping" }), (e: any) => e instanceof ChannelClosedError && /broke the agent protocol/.test(e.message));
    assert.equal(ch.isOpen, false);
    server.close();
  });

  it("closes the channel on malformed JSON in a reply", async () => {
    const { ch, server } = await pair((id, _b, g) => g.write(encodeFrame(id, Kind.Response, 0, 0, Buffer.from("{not json"))));
    await assert.rejects(ch.request<"ping">({ op: "ping" }), /malformed JSON/);
    server.close();
  });

  it("closes the channel when the guest overruns its stream credit", async () => {
    const { ch, server } = await pair((id, _b, g) => {
      // Credit is one window plus what the unread stream has released: never beyond two windows.
      for (let sent = 0; sent <= 2 * INITIAL_WINDOW; sent += 65536) g.write(encodeFrame(id, Kind.Data, 1, 0, Buffer.alloc(65536)));
    });
    const s = ch.exec({ cmd: "flood" });
    await assert.rejects(s.result, /overran its credit/);
    server.close();
  });

  it("times out a request the guest never answers, and stays usable", async () => {
    let answered = 0;
    const { ch, server } = await pair((id, b, g) => {
      if (b.op === "ping") {
        answered++;
        g.write(encodeJson(id, Kind.Response, { ok: true }));
      }
    });
    await assert.rejects(ch.request<"metrics">({ op: "metrics" }, { timeoutMs: 200 }), /did not answer "metrics" within 200 ms/);
    assert.deepEqual(await ch.request<"ping">({ op: "ping" }), { ok: true });
    assert.equal(answered, 1);
    ch.close();
    server.close();
  });
});
