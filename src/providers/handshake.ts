// The first words between the host and a guest's agent, the same for a VM that boots, one
// restored from a snapshot and one a previous server left running: the agent's HELLO within a
// deadline (or before the VMM exits), then `configure` with what the host decides for it.
import type { AgentChannel, ConfigureRequest, Hello } from "../agent-client/index.js";

/** Why a HELLO did not come: the channel closed, the VMM exited, or the deadline passed. */
export class HelloError extends Error {
  override name = "HelloError";
}

/** Waits for the agent's HELLO; rejects with a HelloError that says what happened instead. */
export async function awaitHello(channel: AgentChannel, o: { deadlineMs: number; exited?: Promise<void> }): Promise<Hello> {
  let timer: NodeJS.Timeout | undefined;
  const failure = await Promise.race([
    channel.hello.then(
      () => null,
      (e: Error) => `the agent channel closed before hello (${e.message})`,
    ),
    ...(o.exited ? [o.exited.then(() => "QEMU exited before the agent said hello")] : []),
    new Promise<string>((r) => (timer = setTimeout(() => r(`the agent did not say hello within ${o.deadlineMs} ms`), o.deadlineMs))),
  ]);
  clearTimeout(timer);
  if (failure) {
    channel.close();
    throw new HelloError(failure);
  }
  return channel.hello;
}

/** Sends `configure` (the agent applies each field it is given). */
export async function configure(channel: AgentChannel, fields: Omit<ConfigureRequest, "op">): Promise<void> {
  await channel.request<"configure">({ op: "configure", ...fields });
}
