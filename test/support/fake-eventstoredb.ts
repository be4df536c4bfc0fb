/**
 * A fake EventStoreDB for the adapter's tests without a server: in process, speaking the
 * client's own gRPC protocol (the generated protobufs of @eventstore/db-client over the
 * @grpc/grpc-js the client itself resolves, so no second copy is involved).
 *
 * It serves Streams.Read (reads of $all and of a stream, catch-up subscriptions to $all) and
 * Streams.Append, allows 100 concurrent calls per connection as EventStoreDB (Kestrel) does,
 * and counts the read calls still open: one the adapter abandons without cancelling stays
 * open, since the fake, like the server, waits for the client to take what it sends.
 *
 * Deliberately simple: one log with commit = prepare positions; filters are ignored (the
 * adapter re-checks every event); no dedupe by id for numeric / no_stream appends (a retry
 * conflicts, so the adapter's own read-back is what a test sees); for 'any' appends whose
 * ids are all in the stream it answers with the stream's CURRENT revision, the least
 * helpful answer a dedupe can give, and ids only partly there conflict, as on the server.
 */
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';

// The generated protobuf classes and grpc-js are loaded untyped (hence the `any`s below).
const clientRequire = createRequire(createRequire(import.meta.url).resolve('@eventstore/db-client'));
const grpc = clientRequire('@grpc/grpc-js');
const { StreamsService } = clientRequire('../generated/streams_grpc_pb');
const pb = clientRequire('../generated/streams_pb');
const shared = clientRequire('../generated/shared_pb');

const NO_POSITION = (1n << 64n) - 1n;

export interface FakeRecord {
  stream: string;
  id: string;
  type: string;
  revision: number;
  position: bigint;
  data: Uint8Array;
  metadata: Uint8Array;
  /** Ticks (100 ns) since the Unix epoch, as the server sends `created`. */
  created: bigint;
}

/** One Streams.Read request, as the fake understood it. */
export interface ReadRequest {
  kind: 'all' | 'stream' | 'subscription';
  stream?: string;
  direction: 'forwards' | 'backwards';
  /** 'start' | 'end', a revision (stream reads) or a commit position. */
  from: 'start' | 'end' | bigint;
  count?: bigint;
}

export interface FakeEventStoreDb {
  /** A connection string for openEventStoreDb. */
  readonly url: string;
  /** Read calls (reads and subscriptions) the fake is still serving. */
  readonly openReads: number;
  readonly reads: ReadRequest[];
  readonly log: readonly FakeRecord[];
  /** Appends `count` events (about 1 KB each: a read of a few dozen fills the flow-control window). */
  seed(stream: string, count: number, type?: string): FakeRecord[];
  /** Ends every open subscription: with UNAVAILABLE (a restart, a leader election) or cleanly. */
  dropSubscriptions(how: 'unavailable' | 'end'): void;
  /** Refuses the next `n` subscriptions with UNAVAILABLE, before confirming them. */
  refuseSubscriptions(n: number): void;
  /** Bytes (data + metadata) one append may carry; EventStoreDB's default is 1 MiB. */
  maxAppendSize: number;
  /** 'none': stream reads carry the "no position" of servers before 22.10. */
  streamReadPositions: 'log' | 'none';
  close(): void;
}

export async function startFakeEventStoreDb(): Promise<FakeEventStoreDb> {
  const log: FakeRecord[] = [];
  const reads: ReadRequest[] = [];
  const live = new Set<(record: FakeRecord) => void>();
  const subscriptionCalls = new Set<any>();
  let openReads = 0;
  let refusals = 0;

  const streamOf = (name: string) => log.filter((r) => r.stream === name);
  const lastRevision = (name: string) => streamOf(name).at(-1)?.revision ?? -1;

  function record(stream: string, id: string, type: string, data: Uint8Array, metadata: Uint8Array): FakeRecord {
    const revision = lastRevision(stream) + 1;
    const rec = { stream, id, type, revision, position: BigInt(log.length + 1) * 1000n, data, metadata, created: BigInt(Date.now()) * 10_000n };
    log.push(rec);
    return rec;
  }

  function publish(records: FakeRecord[]): void {
    for (const rec of records) for (const deliver of live) deliver(rec);
  }

  function readEvent(rec: FakeRecord, noPosition = false): any {
    const r = new pb.ReadResp.ReadEvent.RecordedEvent();
    const id = new shared.UUID();
    id.setString(rec.id);
    r.setId(id);
    const sid = new shared.StreamIdentifier();
    sid.setStreamName(Buffer.from(rec.stream));
    r.setStreamIdentifier(sid);
    r.setStreamRevision(String(rec.revision));
    const position = String(noPosition ? NO_POSITION : rec.position);
    r.setPreparePosition(position);
    r.setCommitPosition(position);
    const m = r.getMetadataMap();
    m.set('type', rec.type);
    m.set('content-type', 'application/json');
    m.set('created', String(rec.created));
    r.setData(rec.data);
    r.setCustomMetadata(rec.metadata);
    const event = new pb.ReadResp.ReadEvent();
    event.setEvent(r);
    if (noPosition) event.setNoPosition(new shared.Empty());
    else event.setCommitPosition(String(rec.position));
    const resp = new pb.ReadResp();
    resp.setEvent(event);
    return resp;
  }

  /**
   * Writes `responses` as the client takes them (flow control), then ends the call unless
   * `keepOpen` (a subscription: `push` queues live events behind what is not sent yet).
   */
  function serve(call: any, responses: any[], keepOpen = false): { settle(): void; push(resp: any): void } {
    openReads++;
    let settled = false;
    const settle = () => {
      if (settled) return;
      settled = true;
      openReads--;
    };
    call.on('cancelled', settle);
    let i = 0;
    let waiting = false;
    const pump = (): void => {
      waiting = false;
      while (!settled && i < responses.length) {
        if (!call.write(responses[i++])) {
          waiting = true;
          return void call.once('drain', pump);
        }
      }
      if (!settled && !keepOpen) {
        call.end();
        settle();
      }
    };
    pump();
    return {
      settle,
      push(resp) {
        responses.push(resp);
        if (!waiting) pump();
      },
    };
  }

  function readAll(call: any, options: any): void {
    const all = options.getAll();
    const backwards = options.getReadDirection() === 1;
    const from: ReadRequest['from'] = all.hasPosition() ? BigInt(all.getPosition().getCommitPosition()) : all.hasEnd() ? 'end' : 'start';
    const count = BigInt(options.getCount());
    reads.push({ kind: 'all', direction: backwards ? 'backwards' : 'forwards', from, count });
    let records = backwards ? [...log].reverse() : [...log];
    // Forwards from a position includes it; backwards from a position reads what is before it.
    if (typeof from === 'bigint') records = records.filter((r) => (backwards ? r.position < from : r.position >= from));
    serve(call, records.slice(0, Number(count)).map((r) => readEvent(r)));
  }

  function readStream(call: any, options: any): void {
    const opts = options.getStream();
    const stream = Buffer.from(opts.getStreamIdentifier().getStreamName_asU8()).toString();
    const backwards = options.getReadDirection() === 1;
    const from: ReadRequest['from'] = opts.hasRevision() ? BigInt(opts.getRevision()) : opts.hasEnd() ? 'end' : 'start';
    const count = BigInt(options.getCount());
    reads.push({ kind: 'stream', stream, direction: backwards ? 'backwards' : 'forwards', from, count });
    const events = streamOf(stream);
    if (events.length === 0) {
      const notFound = new pb.ReadResp.StreamNotFound();
      notFound.setStreamIdentifier(opts.getStreamIdentifier());
      const resp = new pb.ReadResp();
      resp.setStreamNotFound(notFound);
      return void serve(call, [resp]);
    }
    let records = backwards ? [...events].reverse() : events;
    if (typeof from === 'bigint') records = records.filter((r) => (backwards ? r.revision <= Number(from) : r.revision >= Number(from)));
    const noPosition = fake.streamReadPositions === 'none';
    serve(call, records.slice(0, Number(count)).map((r) => readEvent(r, noPosition)));
  }

  function subscribe(call: any, options: any): void {
    const all = options.getAll();
    const from: ReadRequest['from'] = all.hasPosition() ? BigInt(all.getPosition().getCommitPosition()) : all.hasEnd() ? 'end' : 'start';
    reads.push({ kind: 'subscription', direction: 'forwards', from });
    if (refusals > 0) {
      refusals--;
      return void call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'fake: not available' });
    }
    const confirmation = new pb.ReadResp();
    const confirmed = new pb.ReadResp.SubscriptionConfirmation();
    confirmed.setSubscriptionId(randomUUID());
    confirmation.setConfirmation(confirmed);
    const caughtUp = new pb.ReadResp();
    caughtUp.setCaughtUp(new pb.ReadResp.CaughtUp());
    // A subscription from a position starts after it.
    const history = from === 'end' ? [] : log.filter((r) => from === 'start' || r.position > from);
    const { settle, push } = serve(call, [confirmation, ...history.map((r) => readEvent(r)), caughtUp], true);
    const deliver = (rec: FakeRecord) => push(readEvent(rec));
    live.add(deliver);
    subscriptionCalls.add(call);
    const forget = () => {
      live.delete(deliver);
      subscriptionCalls.delete(call);
      settle();
    };
    call.on('cancelled', forget);
    call.on('finish', forget);
  }

  function append(call: any, callback: (err: unknown, resp?: any) => void): void {
    let options: any;
    const proposed: any[] = [];
    call.on('data', (req: any) => (req.hasOptions() ? (options = req.getOptions()) : proposed.push(req.getProposedMessage())));
    call.on('end', () => {
      const stream = Buffer.from(options.getStreamIdentifier().getStreamName_asU8()).toString();
      const size = proposed.reduce((n, p) => n + p.getData_asU8().length + p.getCustomMetadata_asU8().length, 0);
      if (size > fake.maxAppendSize) {
        const metadata = new grpc.Metadata();
        metadata.set('exception', 'maximum-append-size-exceeded');
        metadata.set('maximum-append-size', String(fake.maxAppendSize));
        return callback({ code: grpc.status.INVALID_ARGUMENT, details: `Maximum Append Size of ${fake.maxAppendSize} Exceeded.`, metadata });
      }
      // The server parses the ids as UUIDs and records them lowercase.
      const ids = proposed.map((p) => String(p.getId().getString()).toLowerCase());
      const current = lastRevision(stream);
      const known = new Set(streamOf(stream).map((r) => r.id));
      const found = ids.filter((id) => known.has(id)).length;
      const anyLike = options.hasAny() || options.hasStreamExists();
      const holds = options.hasAny()
        ? true
        : options.hasNoStream()
          ? current === -1
          : options.hasStreamExists()
            ? current >= 0
            : current === Number(options.getRevision());
      if (!holds || (anyLike && found > 0 && found < ids.length)) return callback(null, wrongExpectedVersion(options, current));
      const resp = new pb.AppendResp();
      const success = new pb.AppendResp.Success();
      const position = new pb.AppendResp.Position();
      if (anyLike && found === ids.length) {
        success.setCurrentRevision(String(current)); // deduplicated: see the header
        const last = streamOf(stream).at(-1)!;
        position.setCommitPosition(String(last.position));
        position.setPreparePosition(String(last.position));
      } else {
        const written = proposed.map((p, i) =>
          record(stream, ids[i]!, p.getMetadataMap().get('type'), p.getData_asU8(), p.getCustomMetadata_asU8()),
        );
        success.setCurrentRevision(String(written.at(-1)!.revision));
        position.setCommitPosition(String(written.at(-1)!.position));
        position.setPreparePosition(String(written.at(-1)!.position));
        publish(written);
      }
      success.setPosition(position);
      resp.setSuccess(success);
      callback(null, resp);
    });
  }

  function wrongExpectedVersion(options: any, current: number): any {
    const wrong = new pb.AppendResp.WrongExpectedVersion();
    if (current >= 0) wrong.setCurrentRevision(String(current));
    else wrong.setCurrentNoStream(new shared.Empty());
    if (options.hasAny()) wrong.setExpectedAny(new shared.Empty());
    else if (options.hasNoStream()) wrong.setExpectedNoStream(new shared.Empty());
    else if (options.hasStreamExists()) wrong.setExpectedStreamExists(new shared.Empty());
    else wrong.setExpectedRevision(options.getRevision());
    const resp = new pb.AppendResp();
    resp.setWrongExpectedVersion(wrong);
    return resp;
  }

  const server = new grpc.Server({ 'grpc.max_concurrent_streams': 100 });
  server.addService(StreamsService, {
    read(call: any) {
      const options = call.request.getOptions();
      if (options.hasSubscription()) subscribe(call, options);
      else if (options.hasAll()) readAll(call, options);
      else readStream(call, options);
    },
    append,
  });
  const port: number = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err: Error | null, p: number) => (err ? reject(err) : resolve(p))),
  );

  const fake: FakeEventStoreDb = {
    url: `esdb://127.0.0.1:${port}?tls=false`,
    get openReads() {
      return openReads;
    },
    reads,
    log,
    maxAppendSize: 1024 * 1024,
    streamReadPositions: 'log',
    seed(stream, count, type = 'Counted') {
      const pad = 'x'.repeat(1000);
      const written = Array.from({ length: count }, (_, i) =>
        record(stream, randomUUID(), type, Buffer.from(JSON.stringify({ i, pad })), Buffer.from('{}')),
      );
      publish(written);
      return written;
    },
    dropSubscriptions(how) {
      for (const call of [...subscriptionCalls]) {
        if (how === 'end') call.end();
        else call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'fake: server restarting' });
      }
    },
    refuseSubscriptions(n) {
      refusals = n;
    },
    close() {
      server.forceShutdown();
    },
  };
  return fake;
}
