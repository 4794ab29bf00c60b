// Where a guest meets its egress: the proxy its agent listens for on the guest's loopback
// (allowlisted sandboxes), and the file the egress CA's certificate is written to (sandboxes with
// egress rules). Core sets both up; the desktop image's browser is told about both when it is built.
export const GUEST_PROXY_ADDR = "127.0.0.1";
export const GUEST_PROXY_PORT = 3128;
export const GUEST_CA_FILE = "/usr/local/share/ca-certificates/forgevm-egress.crt";
