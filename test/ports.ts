// Test helper: loopback ports, asked of the kernel rather than guessed.
import { createServer, type AddressInfo } from "node:net";

/** A TCP port nothing listens on right now. */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return port;
}

/** Whether `port` on 127.0.0.1 can be listened on now. */
export async function portFree(port: number): Promise<boolean> {
  const srv = createServer();
  return new Promise((resolve) => {
    srv.once("error", () => resolve(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)));
  });
}
