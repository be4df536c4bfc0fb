/** projections/apikeys: `last_used_at` is the latest use in the log's order. */
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import { apiKeysProjection } from '../../projections/apikeys/index.js';

let position = 0;
const recorded = (type: string, data: Record<string, unknown>): RecordedEvent => ({
  id: `e${++position}`,
  type,
  stream: 'apikey-k1',
  revision: position,
  position: String(position),
  data,
  metadata: {},
  recordedAt: new Date().toISOString(),
});

function run(events: RecordedEvent[]): Doc | null {
  let doc: Doc | null = null;
  for (const e of events) for (const u of apiKeysProjection.apply(e)) doc = u.evolve(doc);
  return doc;
}

it('a use recorded while the clock ran a day ahead is replaced by the next use, not kept until the clock catches up', () => {
  const doc = run([
    recorded('ApiKeyMinted', { keyId: 'k1', kind: 'management', ownerPk: 1, label: 'l', maskedKey: 'm', keyHash: 'h', at: '2026-11-22T10:00:00.000Z' }),
    recorded('ApiKeyUsed', { keyId: 'k1', at: '2026-11-23T10:05:00.000Z' }), // the clock a day ahead
    recorded('ApiKeyUsed', { keyId: 'k1', at: '2026-11-22T10:06:00.000Z' }), // corrected
  ]);
  expect(doc?.lastUsedAt).toBe('2026-11-22T10:06:00.000Z');
});
