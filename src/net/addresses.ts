// Which addresses a guest may never reach through the egress proxy: the host itself, private
// and link-local networks (cloud metadata included), and addresses that are not unicast.
import { BlockList, isIP } from "node:net";
import { networkInterfaces } from "node:os";

export const BLOCKED_V4: [string, number][] = [
  ["0.0.0.0", 8], // "this network"
  ["10.0.0.0", 8],
  ["100.64.0.0", 10], // carrier-grade NAT
  ["127.0.0.0", 8],
  ["169.254.0.0", 16], // link-local, 169.254.169.254 metadata
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15], // benchmarking
  ["224.0.0.0", 4], // multicast
  ["240.0.0.0", 4], // reserved, broadcast
];
const BLOCKED_V6: [string, number][] = [
  ["::", 96], // unspecified, loopback and IPv4-compatible (::a.b.c.d)
  ["64:ff9b::", 96], // NAT64 of any IPv4, private ones included
  ["fc00::", 7], // unique local
  ["fe80::", 10], // link-local
  ["ff00::", 8], // multicast
];

/** A set of networks, matched by address. */
export class AddressSet {
  private readonly list = new BlockList();
  private readonly nets: { addr: string; prefix: number; family: "ipv4" | "ipv6" }[] = [];
  private empty = true;

  /** Adds an address or a CIDR network ("10.0.0.0/8", "fd00::/8", "1.2.3.4"). */
  add(cidr: string): void {
    const [addr, bits] = cidr.split("/");
    const family = isIP(addr);
    if (!family) throw new RangeError(`"${cidr}" is not an IP address or network`);
    const max = family === 4 ? 32 : 128;
    const prefix = bits === undefined ? max : Number(bits);
    if (!Number.isInteger(prefix) || prefix < 0 || prefix > max || (bits !== undefined && !/^\d+$/.test(bits))) {
      throw new RangeError(`"${cidr}" has a bad prefix length`);
    }
    this.list.addSubnet(addr, prefix, family === 4 ? "ipv4" : "ipv6");
    this.nets.push({ addr, prefix, family: family === 4 ? "ipv4" : "ipv6" });
    this.empty = false;
  }

  /** Whether each network of this set lies inside one network of `other`. */
  within(other: AddressSet): boolean {
    return this.nets.every((n) =>
      other.nets.some((o) => {
        if (o.family !== n.family || o.prefix > n.prefix) return false;
        const one = new BlockList();
        one.addSubnet(o.addr, o.prefix, o.family);
        return one.check(n.addr, n.family);
      }),
    );
  }

  has(ip: string): boolean {
    if (this.empty) return false;
    const v4 = mappedV4(ip);
    if (v4) return this.list.check(v4, "ipv4");
    const family = isIP(ip);
    return family !== 0 && this.list.check(ip, family === 4 ? "ipv4" : "ipv6");
  }
}

/**
 * The IPv4 address inside an IPv4-mapped IPv6 address (::ffff:a.b.c.d in any spelling), else
 * null. Such addresses are checked as IPv4 (Node's BlockList would match every IPv4 address
 * against a ::ffff:0:0/96 rule, so there is none).
 */
function mappedV4(ip: string): string | null {
  if (isIP(ip) !== 6) return null;
  const canonical = new URL(`http://[${ip}]/`).hostname.slice(1, -1); // WHATWG form: hex, compressed
  const h = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(canonical);
  if (!h) return null;
  const a = parseInt(h[1], 16),
    b = parseInt(h[2], 16);
  return `${a >> 8}.${a & 255}.${b >> 8}.${b & 255}`;
}

/** Private, link-local, loopback and non-unicast ranges, plus every address of this host. */
export function blockedAddresses(): AddressSet {
  const set = new AddressSet();
  for (const [a, p] of BLOCKED_V4) set.add(`${a}/${p}`);
  for (const [a, p] of BLOCKED_V6) set.add(`${a}/${p}`);
  for (const addrs of Object.values(networkInterfaces())) {
    for (const a of addrs ?? []) set.add(a.address.split("%")[0]);
  }
  return set;
}
