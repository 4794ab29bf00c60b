// The host firewall for VMMs with a network device (network "full"). QEMU's user-mode network
// opens ordinary sockets in the host's network namespace as the VMM's uid, so one iptables chain,
// entered for the whole VM uid range, keeps them off this host's own addresses (loopback and
// 10.0.2.2 included), private and link-local networks and cloud metadata. The host's DNS
// resolvers stay reachable on port 53 only, for QEMU's built-in resolver. IPv6 is refused
// outright (the guest's user network has none).
import { readFile } from "node:fs/promises";
import { isIP } from "node:net";
import { run } from "../../util/process.js";
import { UID_BASE } from "./jail.js";

export const CHAIN = "FORGEVM-VMM";
const UID_RANGE = `${UID_BASE}-${UID_BASE + (1 << 24) - 1}`;

/** Networks a VMM may not connect to (the same ranges the egress proxy refuses). */
export interface FirewallSpec {
  blockedV4: string[];
  /** Exceptions the operator allows (config network.allow_private). */
  allowV4?: string[];
}

/** Why VMMs with a network device cannot run here, or null when they can. */
export async function firewallProblem(jailed: boolean): Promise<string | null> {
  if (!jailed) return "it needs the confined VMM (a server running as root)";
  try {
    await run("iptables", ["-w", "-L", "OUTPUT", "-n"]);
    return null;
  } catch (e) {
    return `iptables is not usable (${(e as Error).message.split("\n")[0]}); install the iptables package`;
  }
}

async function ipt(bin: string, args: string[]): Promise<boolean> {
  try {
    await run(bin, ["-w", ...args]);
    return true;
  } catch {
    return false;
  }
}

/** The nameservers of /etc/resolv.conf that are IPv4 addresses. */
async function resolvers(): Promise<string[]> {
  const text = await readFile("/etc/resolv.conf", "utf8").catch(() => "");
  return [...text.matchAll(/^nameserver\s+(\S+)/gm)].map((m) => m[1]).filter((a) => isIP(a) === 4);
}

const HOOK = ["OUTPUT", "-m", "owner", "--uid-owner", UID_RANGE, "-j", CHAIN];
const LOCAL_RULE = [CHAIN, "-m", "addrtype", "--dst-type", "LOCAL", "-j", "REJECT"];

/** Whether the chain is hooked in and still holds its rules (someone may have flushed them). */
export async function firewallIntact(): Promise<boolean> {
  return (await ipt("iptables", ["-C", ...HOOK])) && (await ipt("iptables", ["-C", ...LOCAL_RULE]));
}

/** (Re)writes the chain and hooks it into OUTPUT for the VM uid range; idempotent. */
export async function installFirewall(spec: FirewallSpec): Promise<void> {
  await ipt("iptables", ["-N", CHAIN]); // exists already: fine
  if (!(await ipt("iptables", ["-F", CHAIN]))) throw new Error(`cannot write the iptables chain ${CHAIN}`);
  for (const ns of await resolvers()) {
    for (const proto of ["udp", "tcp"]) await run("iptables", ["-w", "-A", CHAIN, "-d", ns, "-p", proto, "--dport", "53", "-j", "RETURN"]);
  }
  for (const cidr of spec.allowV4 ?? []) await run("iptables", ["-w", "-A", CHAIN, "-d", cidr, "-j", "RETURN"]);
  await run("iptables", ["-w", "-A", ...LOCAL_RULE]);
  for (const cidr of spec.blockedV4) await run("iptables", ["-w", "-A", CHAIN, "-d", cidr, "-j", "REJECT"]);
  if (!(await ipt("iptables", ["-C", ...HOOK]))) await run("iptables", ["-w", "-I", ...HOOK]);
  const hook6 = ["OUTPUT", "-m", "owner", "--uid-owner", UID_RANGE, "-j", "REJECT"];
  if (!(await ipt("ip6tables", ["-C", ...hook6]))) await ipt("ip6tables", ["-I", ...hook6]);
}
