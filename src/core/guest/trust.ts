// The egress CA in a guest's trust stores, for a sandbox whose egress rules make the proxy answer
// its HTTPS with certificates from that CA: the system bundle (which OpenSSL, curl, Python's ssl
// and most tools read), the file update-ca-certificates keeps, and a file of its own that the
// variables Node, Python requests and curl read point at (exec-defaults.ts). Only the certificate
// goes in: the key never leaves the host. Written idempotently, since a restored disk has it already.
import type { Vm } from "../../providers/provider.js";

import { GUEST_CA_FILE } from "../../schemas/guest-egress.js";
/** The system bundle, where Debian's and most images' TLS libraries look. */
export const GUEST_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";

/** Environment that points TLS clients that do not read the system bundle at it. */
export function trustEnv(): Record<string, string> {
  return { NODE_EXTRA_CA_CERTS: GUEST_CA_FILE, REQUESTS_CA_BUNDLE: GUEST_BUNDLE, SSL_CERT_FILE: GUEST_BUNDLE, CURL_CA_BUNDLE: GUEST_BUNDLE };
}

/** Puts the CA certificate `pem` in the guest's trust stores, once. */
export async function installTrust(vm: Vm, pem: string): Promise<void> {
  const c = vm.guest;
  await c.request<"mkdir">({ op: "mkdir", path: "/usr/local/share/ca-certificates", mode: 0o755, parents: true });
  await c.writeFile(GUEST_CA_FILE, pem, { mode: 0o644 });
  const bundle = await c.readFileBuffer(GUEST_BUNDLE, 16 * 1024 * 1024).catch(() => null);
  if (bundle?.includes(pem.trim())) return;
  await c.request<"mkdir">({ op: "mkdir", path: "/etc/ssl/certs", mode: 0o755, parents: true });
  const text = bundle ? bundle.toString("utf8") : "";
  await c.writeFile(GUEST_BUNDLE, `${text}${text && !text.endsWith("\n") ? "\n" : ""}${pem.trim()}\n`, { mode: 0o644 });
}
