// Published ports: a host TCP listener per mapping whose connections are carried to a port
// inside the guest through the agent channel, so they work in every network mode and give the
// guest no way out. Listeners bind 127.0.0.1 unless the mapping names another address.
import { createServer, isIP, type Server, type Socket } from "node:net";
import type { AgentChannel } from "../agent-client/index.js";
import { splice, tunnelDuplex } from "./tunnel.js";
import type { Static } from "typebox";
import type { PortMapping as PortMappingShape } from "../schemas/rest.js";

/** A published port: the host address and port its listener binds (port 0 in a request: any free port, reported back), and the guest port it reaches. The wire's shape. */
export type PortMapping = Static<typeof PortMappingShape>;

/** A bad port spec, a taken port or a duplicate; the message says which. */
export class PortError extends Error {
  override name = "PortError";
  constructor(
    message: string,
    readonly conflict = false,
  ) {
    super(message);
  }
}

/** Parses "GUEST", "HOST:GUEST" or "ADDR:HOST:GUEST" (ADDR may be [v6]). */
export function parsePortSpec(spec: string): PortMapping {
  const m = /^(?:(?:(\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]):)?(\d{1,5}):)?(\d{1,5})$/.exec(spec.trim());
  if (!m) throw new PortError(`port "${spec}" must look like GUEST, HOST:GUEST or ADDRESS:HOST:GUEST (e.g. "8080:80")`);
  const hostIp = (m[1] ?? "127.0.0.1").replace(/^\[|\]$/g, "");
  if (!isIP(hostIp)) throw new PortError(`port "${spec}": ${hostIp} is not an IP address`);
  const guest = Number(m[3]);
  const host = m[2] === undefined ? guest : Number(m[2]);
  if (guest < 1 || guest > 65535) throw new PortError(`port "${spec}": guest port must be 1-65535`);
  if (host > 65535) throw new PortError(`port "${spec}": host port must be 0-65535`);
  return { host_ip: hostIp, host_port: host, guest_port: guest };
}

/** The published ports of one sandbox. */
export class PublishedPorts {
  private readonly servers = new Map<string, { mapping: PortMapping; server: Server; sockets: Set<Socket> }>();

  /** `channel` returns what carries TCP to the sandbox's guest now. */
  constructor(
    private readonly channel: () => Pick<AgentChannel, "isOpen" | "connect">,
    /** Told of every connection as it opens; what it returns is called once it closes (idle policies watch this). */
    private readonly onConnection: () => () => void = () => () => {},
  ) {}

  list(): PortMapping[] {
    return [...this.servers.values()].map((s) => s.mapping);
  }

  /** Starts listening for a mapping; resolves with the bound mapping (the real port for 0). */
  async add(m: PortMapping): Promise<PortMapping> {
    if (m.host_port && this.servers.has(key(m.host_ip, m.host_port))) throw new PortError(`host port ${m.host_ip}:${m.host_port} is already published by this sandbox`, true);
    const sockets = new Set<Socket>();
    const server = createServer({ allowHalfOpen: true }, (socket) => {
      const closed = this.onConnection();
      sockets.add(socket);
      socket.on("close", () => {
        sockets.delete(socket);
        closed();
      });
      const ch = this.channel();
      if (!ch.isOpen) return void socket.destroy();
      const t = ch.connect({ addr: "127.0.0.1", port: m.guest_port });
      // Nothing listens on the guest port: drop the host connection (a refused connect).
      t.connected.catch(() => socket.destroy());
      splice(socket, tunnelDuplex(t));
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", (e: NodeJS.ErrnoException) => {
        const why =
          e.code === "EADDRINUSE"
            ? "is already in use"
            : e.code === "EACCES"
              ? "needs privileges this server does not have"
              : e.code === "EADDRNOTAVAIL"
                ? "is not an address of this host"
                : e.message;
        reject(new PortError(`host port ${m.host_ip}:${m.host_port} ${why}`, e.code === "EADDRINUSE"));
      });
      server.listen({ host: m.host_ip, port: m.host_port, exclusive: true }, resolve);
    });
    const bound = { ...m, host_port: (server.address() as { port: number }).port };
    this.servers.set(key(bound.host_ip, bound.host_port), { mapping: bound, server, sockets });
    return bound;
  }

  /** Stops publishing a host port; false if it was not published. */
  async remove(hostPort: number, hostIp?: string): Promise<boolean> {
    for (const [k, s] of this.servers) {
      if (s.mapping.host_port !== hostPort || (hostIp && s.mapping.host_ip !== hostIp)) continue;
      this.servers.delete(k);
      await closeServer(s.server, s.sockets);
      return true;
    }
    return false;
  }

  /** Closes every listener. */
  async close(): Promise<void> {
    const all = [...this.servers.values()];
    this.servers.clear();
    await Promise.all(all.map((s) => closeServer(s.server, s.sockets)));
  }
}

function key(ip: string, port: number): string {
  return `${ip}|${port}`;
}

/** Stops listening and ends connections in flight: a removed port stops serving at once. */
function closeServer(server: Server, sockets: Set<Socket>): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    for (const s of sockets) s.destroy();
  });
}
