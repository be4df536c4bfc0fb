/**
 * The client address a throttle counts. IPv4 as it is; IPv6 by its /64: one subscriber's
 * network is handed a /64 (or more) and picks addresses in it freely, so counting full
 * IPv6 addresses would give one client as many budgets as it likes. An IPv4 address mapped
 * into IPv6 (`::ffff:a.b.c.d`, however written) is the IPv4 address; a port or brackets that
 * a proxy's X-Forwarded-For entry may carry are not part of it.
 */
import { isIPv4, isIPv6 } from 'node:net';

export function throttleAddress(ip: string): string {
  let address = ip.trim();
  address = /^\[([^\]]+)\](?::\d+)?$/.exec(address)?.[1] ?? address; // [v6]:port
  const v4WithPort = /^(\d{1,3}(?:\.\d{1,3}){3}):\d+$/.exec(address);
  if (v4WithPort && isIPv4(v4WithPort[1]!)) return v4WithPort[1]!;
  address = address.split('%')[0]!; // a zone id (fe80::1%eth0) is not part of the address
  if (!isIPv6(address)) return isIPv4(address) ? address : ip;
  const groups = expand(address);
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
    return [groups[6]! >> 8, groups[6]! & 0xff, groups[7]! >> 8, groups[7]! & 0xff].join('.');
  }
  return `${groups.slice(0, 4).map((g) => g.toString(16)).join(':')}::/64`;
}

/** The eight 16-bit groups of a valid IPv6 address (`::` expanded, a trailing dotted quad as two). */
function expand(address: string): number[] {
  const groupsOf = (part: string): number[] =>
    part
      ? part.split(':').flatMap((g) => {
          if (!g.includes('.')) return [parseInt(g, 16)];
          const [a, b, c, d] = g.split('.').map(Number) as [number, number, number, number];
          return [(a << 8) | b, (c << 8) | d];
        })
      : [];
  const [head = '', tail] = address.split('::');
  if (tail === undefined) return groupsOf(head);
  const [h, t] = [groupsOf(head), groupsOf(tail)];
  return [...h, ...Array<number>(8 - h.length - t.length).fill(0), ...t];
}
