import { throttleAddress } from '../../services/kernel/client-address.js';

test('IPv4 counts as itself, also mapped into IPv6', () => {
  expect(throttleAddress('203.0.113.7')).toBe('203.0.113.7');
  expect(throttleAddress('::ffff:203.0.113.7')).toBe('203.0.113.7');
  expect(throttleAddress('::FFFF:203.0.113.7')).toBe('203.0.113.7');
  expect(throttleAddress('0:0:0:0:0:ffff:203.0.113.7')).toBe('203.0.113.7');
  expect(throttleAddress('::ffff:cb00:7107')).toBe('203.0.113.7');
});

test('a port or brackets from a proxy header are not part of the address', () => {
  expect(throttleAddress('203.0.113.7:51234')).toBe('203.0.113.7');
  expect(throttleAddress('[2001:db8:85a3:42::1]:443')).toBe('2001:db8:85a3:42::/64');
  expect(throttleAddress('[2001:db8:85a3:42::1]')).toBe('2001:db8:85a3:42::/64');
});

test('IPv6 counts by its /64, however it is written', () => {
  const expected = '2001:db8:85a3:42::/64';
  for (const ip of ['2001:db8:85a3:42::1', '2001:0db8:85a3:0042:ffff:ffff:ffff:ffff', '2001:DB8:85A3:42:1:2:3:4', '2001:db8:85a3:42::5%eth0', '2001:db8:85a3:42:0:0:1.2.3.4']) {
    expect([ip, throttleAddress(ip)]).toEqual([ip, expected]);
  }
  expect(throttleAddress('::1')).toBe('0:0:0:0::/64');
  expect(throttleAddress('2001:db8::')).toBe('2001:db8:0:0::/64');
  expect(throttleAddress('2001:db8:85a3:43::1')).not.toBe(expected);
});

test('anything else is kept as given', () => {
  expect(throttleAddress('unknown')).toBe('unknown');
  expect(throttleAddress('')).toBe('');
});
