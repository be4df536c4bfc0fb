/** Commands over streams: a stream's history is read once per process, then only what is new. */
import { execute, loadStream, event, FOLD_BUDGET, FOLDS_KEPT, FOLD_MIN_EVENTS, type Evolver } from '../../services/kernel/command.js';
import { countingReads, createMemoryEventStore } from '../support/memory-event-store.js';


const sum: Evolver<number> = { initial: () => 0, evolve: (n, e) => n + (e.data as { n: number }).n };
const add = (n: number) => event('Added', { n });

/** Changes its state in place, so it declares a copy. */
let copies = 0;
const names: Evolver<Set<string>> = {
  initial: () => new Set(),
  evolve: (s, e) => s.add((e.data as { name: string }).name),
  copy: (s) => (copies++, new Set(s)),
};
const name = (n: string) => event('Named', { name: n });

describe('commands over kept folds', () => {
  it('reads a long stream once, then only the events appended since (by anyone)', async () => {
    const base = createMemoryEventStore();
    const { store, read } = countingReads(base);
    for (let i = 0; i < 100; i++) await base.append('tally-a', [add(1)]);
    expect((await loadStream(store, 'tally-a', sum)).state).toBe(100);
    expect(read()).toBe(100);

    // Commands fold what they append themselves: the next one reads nothing old.
    const { state } = await execute(store, 'tally-a', sum, (n) => ({ events: [add(n)], result: undefined }));
    expect(state).toBe(200);
    await execute(store, 'tally-a', sum, () => ({ events: [add(1)], result: undefined }));
    expect(read()).toBe(100);

    // Another process appends: the next load reads just that.
    const other = await base.append('tally-a', [add(5)]);
    expect(await loadStream(store, 'tally-a', sum)).toEqual({ state: 206, revision: 102, position: other.position });
    expect(read()).toBe(101);
  });

  it("says the position of the stream's last event: its own append's, or the one read when it changed nothing", async () => {
    const store = createMemoryEventStore();
    expect((await execute(store, 'tally-p', sum, () => ({ events: [], result: undefined }))).position).toBeNull(); // no stream
    const made = await execute(store, 'tally-p', sum, () => ({ events: [add(1), add(2)], result: undefined }));
    expect(made.position).toBe(made.append!.position);
    await store.append('elsewhere', [add(1)]); // the log moves on; the stream does not
    const same = await execute(store, 'tally-p', sum, () => ({ events: [], result: undefined }));
    expect([same.append, same.position]).toEqual([null, made.append!.position]);
  });

  it('never changes a state already handed out, even with an evolver that works in place', async () => {
    const store = createMemoryEventStore();
    const early = ['ada', 'al', 'ann', 'ava'];
    await store.append('names-a', early.map(name));
    await execute(store, 'names-a', names, () => ({ events: [], result: undefined })); // kept
    const first = await loadStream(store, 'names-a', names);
    await execute(store, 'names-a', names, () => ({ events: [name('bob')], result: undefined }));
    await store.append('names-a', [name('cy')]);
    const last = await loadStream(store, 'names-a', names);
    expect([...first.state]).toEqual(early);
    expect([...last.state]).toEqual([...early, 'bob', 'cy']);
    expect(last.revision).toBe(5);
  });

  it('lets the commands of an in-place evolver work on the kept state without copying it', async () => {
    const base = createMemoryEventStore();
    const { store, read } = countingReads(base);
    await base.append('names-b', ['n0', 'n1', 'n2', 'n3'].map(name));
    copies = 0;
    for (let i = 4; i < 8; i++) {
      await execute(store, 'names-b', names, (s) => {
        if (s.has(`n${i}`)) throw new Error('seen');
        return { events: [name(`n${i}`)], result: undefined };
      });
    }
    await expect(execute(store, 'names-b', names, () => { throw new Error('refused'); })).rejects.toThrow('refused');
    const { state } = await execute(store, 'names-b', names, (s) => ({ events: [name(`n${s.size}`)], result: undefined }));
    expect([...state]).toEqual(['n0', 'n1', 'n2', 'n3', 'n4', 'n5', 'n6', 'n7', 'n8']);
    expect(copies).toBe(0);
    expect(read()).toBe(4); // the history once; then every command found the state the previous one left
  });

  it('keeps one fold per stream: a fold of it by another evolver starts from its own beginning', async () => {
    const store = createMemoryEventStore();
    await store.append('tally-b', [add(2), add(3), add(0), add(0)]);
    const count: Evolver<number> = { initial: () => 0, evolve: (n) => n + 1 };
    expect((await loadStream(store, 'tally-b', sum)).state).toBe(5);
    expect((await loadStream(store, 'tally-b', count)).state).toBe(4);
    expect((await loadStream(store, 'tally-b', sum)).state).toBe(5);
  });

  it('retries a decision lost to another writer on the fresh state', async () => {
    const store = createMemoryEventStore();
    await store.append('tally-c', [add(1)]);
    await loadStream(store, 'tally-c', sum); // kept at 1
    let tries = 0;
    const { state } = await execute(store, 'tally-c', sum, async (n) => {
      if (tries++ === 0) await store.append('tally-c', [add(10)]); // lands between read and append
      return { events: [add(n)], result: undefined };
    });
    expect(tries).toBe(2);
    expect(state).toBe(22); // 1 + 10, then doubled
    expect((await loadStream(store, 'tally-c', sum)).state).toBe(22);
  });

  it('bounds what it keeps by what the states hold', async () => {
    const base = createMemoryEventStore();
    const { store, read } = countingReads(base);
    const weighed: Evolver<Set<string>> = { ...names, weight: (s) => s.size };
    const big = (tag: string) => Array.from({ length: FOLD_BUDGET / 2 + 1 }, (_, i) => name(`${tag}${i}`));
    await base.append('names-big1', big('a'));
    await base.append('names-big2', big('b'));
    const look = (stream: string) => execute(store, stream, weighed, () => ({ events: [], result: undefined }));
    await look('names-big1');
    await look('names-big2'); // over the budget together: the older one goes
    const before = read();
    await look('names-big2');
    expect(read()).toBe(before);
    await look('names-big1');
    expect(read()).toBe(before + FOLD_BUDGET / 2 + 1);
  });

  it('keeps the last state heavier than the whole budget beside the others, rather than fold its history for every command', async () => {
    const base = createMemoryEventStore();
    const { store, read } = countingReads(base);
    const weighed: Evolver<Set<string>> = { ...names, weight: (s) => s.size };
    const look = (stream: string) => execute(store, stream, weighed, () => ({ events: [], result: undefined }));
    await base.append('names-small', ['a', 'b', 'c', 'd'].map(name));
    await base.append('names-huge', Array.from({ length: FOLD_BUDGET + 1 }, (_, i) => name(`h${i}`)));
    await look('names-small');
    await look('names-huge');
    const before = read();
    await execute(store, 'names-huge', weighed, () => ({ events: [name('one more')], result: undefined }));
    for (let i = 0; i < 20; i++) {
      await base.append(`names-other${i}`, ['a', 'b', 'c', 'd'].map(name));
      await look(`names-other${i}`); // other streams come and go
    }
    const others = read();
    await look('names-huge');
    await look('names-small'); // the heavy one pushed out no other
    expect(others - before).toBe(20 * 4);
    expect(read()).toBe(others);
  });

  it('reads only the last event for a state the last event says', async () => {
    const base = createMemoryEventStore();
    const { store, read } = countingReads(base);
    const latest: Evolver<number> = { initial: () => 0, evolve: (_, e) => (e.data as { n: number }).n, lastOnly: true };
    await base.append('seq-a', Array.from({ length: 500 }, (_, i) => add(i + 1)));
    const { result } = await execute(store, 'seq-a', latest, (n) => ({ events: [add(n + 1)], result: n + 1 }));
    expect(result).toBe(501);
    expect((await loadStream(store, 'seq-a', latest)).state).toBe(501);
    expect(read()).toBe(2);
  });

  it('keeps no state a fold may have left half done, nor one that skipped an event', async () => {
    // an in-place fold that fails midway (the first of two appended events applied)
    const store = createMemoryEventStore();
    let failing = false;
    const counter: Evolver<{ n: number }> = {
      initial: () => ({ n: 0 }),
      evolve: (s, e) => {
        if (failing && (e.data as { n: number }).n === 2) throw new Error('evolve failed');
        s.n += 1;
        return s;
      },
      copy: (s) => ({ ...s }),
    };
    await store.append('count-a', [add(1), add(1), add(1), add(1)]);
    await execute(store, 'count-a', counter, () => ({ events: [], result: undefined })); // kept at 4
    failing = true;
    await expect(execute(store, 'count-a', counter, () => ({ events: [add(1), add(2)], result: undefined }))).rejects.toThrow('evolve failed');
    failing = false;
    expect((await execute(store, 'count-a', counter, () => ({ events: [], result: undefined }))).state.n).toBe(6);

    // an append answered idempotently with events recorded after another writer's
    const replayed = { ...add(1), id: '00000000-0000-7000-8000-00000000aaaa' };
    await store.append('tally-d', [add(1), add(1), add(1), add(1)]);
    await loadStream(store, 'tally-d', sum); // kept at 4
    const { state } = await execute(store, 'tally-d', sum, async () => {
      await store.append('tally-d', [add(10)]); // another process, then the same event again
      await store.append('tally-d', [replayed]);
      return { events: [replayed], result: undefined };
    });
    expect(state).toBe(15);
    expect((await loadStream(store, 'tally-d', sum)).state).toBe(15);
  });

  it('bounds how many folds it keeps, and keeps none of streams a read finds as cheaply', async () => {
    const base = createMemoryEventStore();
    const { store, read } = countingReads(base);
    const history = Array.from({ length: FOLD_MIN_EVENTS }, () => add(1));
    for (let i = 0; i <= FOLDS_KEPT; i++) await base.append(`tally-many${i}`, history);
    await base.append('tally-short', history.slice(1));
    for (let i = 0; i <= FOLDS_KEPT; i++) await loadStream(store, `tally-many${i}`, sum); // one too many: the first goes
    await loadStream(store, 'tally-short', sum);
    const before = read();
    await loadStream(store, `tally-many${FOLDS_KEPT}`, sum);
    expect(read()).toBe(before);
    await loadStream(store, 'tally-many0', sum);
    await loadStream(store, 'tally-short', sum);
    expect(read()).toBe(before + 2 * FOLD_MIN_EVENTS - 1);
  });
});
