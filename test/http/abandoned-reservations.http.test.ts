/**
 * A write that reserves a value (a name, an inbox, a username, a phone slot) and then dies
 * (kill -9) before the event that uses it leaves the reservation behind. These tests build
 * exactly that state in the event log (the reservation without its main event, as a crash
 * leaves it), restart the service on the same DATA_DIR, and check through the API that a
 * retry gets the value — while a reservation of a request that may still be in flight is
 * respected.
 */
import { rmSync } from 'node:fs';
import path from 'node:path';
import { openDatabase } from '../../infra/sqlite/driver.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { reservationStream, RESERVED } from '../../services/kernel/reservations.js';
import { event } from '../../services/kernel/command.js';
import { newId } from '../../services/kernel/ids.js';
import { IdentityDeleted, IdentityUpdated, PhoneSlotClaimed, identityStream, phonesStream } from '../../services/identities/events.js';
import { createAccounts } from '../../services/accounts/service.js';
import type { EventStore } from '../../infra/ports/event-store.js';

let s: TestServer;
const dirs: string[] = [];

async function restart(): Promise<void> {
  await s.runtime.close();
  s = await startTestServer({ DATA_DIR: dirs[0], ADMIN_TOKEN: 'admin-secret' });
  dirs.push(s.dataDir); // the fresh one it made and did not use
}

/** What a request that died after its reservation leaves in the log. */
async function abandonedReservation(kind: string, value: string, owner: string): Promise<void> {
  await s.runtime.events.append(reservationStream(kind, value), [event(RESERVED, { kind, owner, permanent: kind === 'inbox' })], { expectedRevision: 'any' });
}

beforeAll(async () => {
  s = await startTestServer({ ADMIN_TOKEN: 'admin-secret' });
  dirs.push(s.dataDir);
});

afterAll(async () => {
  await s.runtime.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

test('a name, an inbox, a username and an email reserved by requests that died are free after a restart; a recent one is not', async () => {
  const owner = await s.signUp();
  const pk = owner.user.pk;
  await abandonedReservation('identityname', `${pk}:crashed name`, `identity-${newId()}`);
  await abandonedReservation('inbox', `crashed-inbox@${s.runtime.config.mailDomain}`, `identity-${newId()}`);
  await abandonedReservation('username', 'crashed-signup', `user-${pk + 1000}`);
  await abandonedReservation('useremail', 'crashed-signup@example.com', `user-${pk + 1000}`);
  await abandonedReservation('useremail', 'ghost@cross.example', `user-${pk + 1001}`);
  const spelled = { username: 'ghost@cross.example', email: 'someone@example.com', password1: 'Secret-pw-2', password2: 'Secret-pw-2' };
  expect((await s.api('POST', '/api/auth/social/', { body: spelled })).status).toBe(400); // may be a sign-up in flight

  // While the service that recorded them runs, they may be requests in flight: respected.
  const inFlight = await s.api('POST', '/api/identities/', { token: owner.access, body: { name: 'Crashed name' } });
  expect([inFlight.status, inFlight.body.code]).toEqual([409, 'conflict']);

  await restart();
  const { access } = (await s.api('POST', '/api/auth/login/', { body: { username: owner.user.username, password: owner.password } })).body;
  const identity = await s.api('POST', '/api/identities/', { token: access, body: { name: 'Crashed name', email_identifier: 'crashed-inbox' } });
  expect([identity.status, identity.body.name, identity.body.inbox]).toEqual([201, 'Crashed name', `crashed-inbox@${s.runtime.config.mailDomain}`]);
  const signup = await s.api('POST', '/api/auth/social/', { body: { username: 'crashed-signup', email: 'crashed-signup@example.com', password1: 'Secret-pw-1', password2: 'Secret-pw-1' } });
  expect(signup.status).toBe(201);
  expect((await s.api('POST', '/api/auth/login/', { body: { username: 'crashed-signup', password: 'Secret-pw-1' } })).status).toBe(200);
  // A username spelling an email no account has (its sign-up died) is free too.
  expect((await s.api('POST', '/api/auth/social/', { body: spelled })).status).toBe(201);
  // The values are held again, by their new owners.
  expect((await s.api('POST', '/api/identities/', { token: access, body: { name: 'crashed NAME' } })).status).toBe(409);
});

test('the name of an identity deleted (or renamed) by a request that died before releasing it is free at once', async () => {
  const owner = await s.signUp();
  const gone = (await s.api('POST', '/api/identities/', { token: owner.access, body: { name: 'Deleted twin' } })).body;
  const renamed = (await s.api('POST', '/api/identities/', { token: owner.access, body: { name: 'Old name' } })).body;
  // The first event of each command landed; the release after it did not.
  await s.runtime.events.append(identityStream(gone.uuid), [event(IdentityDeleted, { identityId: gone.uuid, ownerPk: owner.user.pk, at: new Date().toISOString() })], { expectedRevision: 'any' });
  await s.runtime.events.append(identityStream(renamed.uuid), [event(IdentityUpdated, { identityId: renamed.uuid, name: 'New name', at: new Date().toISOString() })], { expectedRevision: 'any' });

  const again = await s.api('POST', '/api/identities/', { token: owner.access, body: { name: 'Deleted twin' } });
  expect(again.status).toBe(201);
  const reused = await s.api('POST', '/api/identities/', { token: owner.access, body: { name: 'Old name' } });
  expect(reused.status).toBe(201);
  // An identity that holds its name keeps it.
  expect((await s.api('POST', '/api/identities/', { token: owner.access, body: { name: 'Deleted twin' } })).status).toBe(409);
});

test('phone slots claimed by requests that died stop counting after a restart: phones_used is true and the plan has room again', async () => {
  const owner = await s.signUp();
  const pk = owner.user.pk;
  await s.api('PUT', `/api/admin/users/${pk}/subscription/`, { token: 'admin-secret', body: { plan: 'developer' } });
  const withPhone = await s.api('POST', '/api/identities/', { token: owner.access, body: { name: 'Has a phone', provision_phone: true } });
  expect(withPhone.status).toBe(201);
  // Two creates died after claiming their slot (their identities never came to be).
  for (let i = 0; i < 2; i++) {
    await s.runtime.events.append(phonesStream(pk), [event(PhoneSlotClaimed, { identityId: newId(), at: new Date().toISOString() })], { expectedRevision: 'any' });
  }
  expect((await s.api('GET', '/api/subscription/', { token: owner.access })).body).toMatchObject({ phones_used: 3, phones_available: 0 });

  await restart();
  const { access } = (await s.api('POST', '/api/auth/login/', { body: { username: owner.user.username, password: owner.password } })).body;
  expect((await s.api('GET', '/api/subscription/', { token: access })).body).toMatchObject({ phones_used: 1, phones_available: 2 });
  for (const name of ['Second phone', 'Third phone']) {
    expect((await s.api('POST', '/api/identities/', { token: access, body: { name, provision_phone: true } })).status).toBe(201);
  }
  expect((await s.api('GET', '/api/subscription/', { token: access })).body).toMatchObject({ phones_used: 3, phones_available: 0 });
  const fourth = await s.api('POST', '/api/identities/', { token: access, body: { name: 'Fourth phone', provision_phone: true } });
  expect(fourth.status).toBe(402);
});

test('a duplicate rename that fails on one gateway does not release the name the other just gave the user', async () => {
  // Two gateways (cluster) in one process: the same rename, retried by a client, reaches both.
  // Gateway 1 reserves the name, then stalls before its append; gateway 2 renews it and
  // renames; gateway 1 then finds the user renamed (409) and must not free the name.
  const u = await s.signUp();
  const { platform, tokens, keys } = s.runtime.shared;
  const base = platform.events;
  let reads = 0;
  let resume!: () => void;
  const resumed = new Promise<void>((r) => (resume = r));
  let stalled!: () => void;
  const reachedStall = new Promise<void>((r) => (stalled = r));
  const stalling: EventStore = {
    ...base,
    append: base.append.bind(base),
    readAll: base.readAll.bind(base),
    subscribeAll: base.subscribeAll.bind(base),
    headPosition: base.headPosition.bind(base),
    close: base.close.bind(base),
    readStream: async (stream, options) => {
      if (stream === `user-${u.user.pk}` && ++reads === 2) {
        stalled();
        await resumed;
      }
      return base.readStream(stream, options);
    },
  };
  const gateway1 = createAccounts({ ...platform, events: stalling }, tokens, keys.hmacKey);
  const gateway2 = createAccounts(platform, tokens, keys.hmacKey);
  const first = gateway1.updateProfile(u.user.pk, { username: 'samename' }).then(
    () => 200,
    (err: { status?: number }) => (stalled(), err.status),
  );
  await reachedStall;
  expect((await gateway2.updateProfile(u.user.pk, { username: 'samename' })).username).toBe('samename');
  resume();
  expect(await first).toBe(409);
  const other = await s.api('POST', '/api/auth/social/', { body: { username: 'samename', email: 'other-same@example.com', password1: 'Secret-pw-9', password2: 'Secret-pw-9' } });
  expect([other.status, other.body.username]).toEqual([400, ['A user with that username already exists.']]);
});

test('a reservation recorded while the clock was ahead is still free after a restart once the clock is set back (an NTP correction)', async () => {
  await abandonedReservation('username', 'ahead-of-time', `user-${Date.now()}`);
  await s.runtime.close();
  // The clock was a day ahead when the crashed request recorded it: now it is right again.
  const db = openDatabase(path.join(dirs[0], 'events.sqlite'));
  db.prepare('UPDATE events SET recorded_at = ? WHERE stream = ?').run(new Date(Date.now() + 86_400_000).toISOString(), reservationStream('username', 'ahead-of-time'));
  db.close();
  s = await startTestServer({ DATA_DIR: dirs[0], ADMIN_TOKEN: 'admin-secret' });
  dirs.push(s.dataDir);
  const signup = await s.api('POST', '/api/auth/social/', { body: { username: 'ahead-of-time', email: 'ahead-of-time@example.com', password1: 'Secret-pw-3', password2: 'Secret-pw-3' } });
  expect(signup.status).toBe(201);
});
