// Secrets kept on the server, which egress rules name and the egress proxy adds to requests:
// no call here ever gets a value back.
import type { Transport } from "./http.js";
import type { SecretInfo, SecretInput, SecretUpdate } from "./types.js";

export class Secrets {
  /** @internal */
  constructor(private readonly http: Transport) {}

  list(): Promise<SecretInfo[]> {
    return this.http.json("GET", "/secrets");
  }

  /** Stores a secret (names are matched without regard to case); 409 when the name is taken. */
  create(input: SecretInput): Promise<SecretInfo> {
    return this.http.json("POST", "/secrets", { body: input });
  }

  get(name: string): Promise<SecretInfo> {
    return this.http.json("GET", `/secrets/${encodeURIComponent(name)}`);
  }

  /** Replaces the value (its version goes up); rules that name it use the new one on their next request. */
  update(name: string, change: SecretUpdate): Promise<SecretInfo> {
    return this.http.json("PUT", `/secrets/${encodeURIComponent(name)}`, { body: change });
  }

  async remove(name: string): Promise<void> {
    await this.http.json("DELETE", `/secrets/${encodeURIComponent(name)}`);
  }
}
