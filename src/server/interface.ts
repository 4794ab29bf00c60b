// What the server knows of an interface (REST, E2B, Daytona, Custom HTTP, MCP, the console): a
// name, how it registers its routes, which requests it authenticates by its own means, and which
// Host names it serves. The server names no interface; the composition root (compose/app.ts)
// hands it the list, so a new protocol is a folder of interfaces/ and one line there.
import type { IncomingMessage } from "node:http";
import type { FastifyInstance, FastifyRequest } from "fastify";

export interface ServerInterface {
  /** Its name, for the layers test and the logs. */
  readonly name: string;
  /** Registers its routes on the app, under the prefixes it owns. */
  register(app: FastifyInstance): Promise<void>;
  /**
   * Whether it admits a request that carries no matching X-API-Key (the credential every interface
   * accepts): a token of its own checked in its routes, a bearer form, files that hold no data.
   */
  admits?(req: FastifyRequest, apiKey: string): boolean;
  /**
   * Whether a request with `Origin: null` comes from a page this interface serves under a CSP
   * `sandbox` policy (an opaque origin, so a guest's page never runs as this server's origin) and
   * may pass the origin check: it must still carry its own credential, and reaches only a guest.
   */
  fromSandboxedPage?(req: FastifyRequest): boolean;
  /** Where a request without the key is told to send it besides X-API-Key ("on /mcp, as Authorization: Bearer KEY"). */
  readonly keyHint?: string;
  /** A request addressed by its Host (a sandbox's port under a domain) moved to this interface's routes, or undefined when it is not one. */
  rewriteUrl?(req: IncomingMessage): string | undefined;
  /** Whether a Host header names a host it serves, which a server on loopback answers to besides loopback names. */
  servesHost?(host: string): boolean;
}
