/**
 * The client address a throttle counts. IPv4 as it is; IPv6 by its /64: one subscriber's
 * network is handed a /64 (or more) and picks addresses in it freely, so counting full
 * IPv6 addresses would give one client as many budgets as it likes. (An IPv4 address mapped
 * into IPv6, `::ffff:a.b.c.d`, is the IPv4 address.)
 */
import { isIPv6 } from 'node:net';

export function throttleAddress(ip: string): string {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(ip);
  if (mapped) return mapped[1]!;
  const address = ip.split('%')[0]!; // a zone id (fe80::1%eth0) is not part of the address
  if (!isIPv6(address)) return ip;
  // Groups of the written form; a trailing dotted quad stands for two.
  const groupsOf = (part: string) => (part ? part.split(':').flatMap((g) => (g.includes('.') ? ['0', '0'] : [g])) : []);
  const [head = '', tail] = address.split('::');
  const groups = tail === undefined ? groupsOf(head) : [...groupsOf(head), ...Array(8 - groupsOf(head).length - groupsOf(tail).length).fill('0'), ...groupsOf(tail)];
  return `${groups.slice(0, 4).map((g) => parseInt(g, 16).toString(16)).join(':')}::/64`;
}
