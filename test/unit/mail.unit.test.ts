/** Pure parts of mail: addresses, subjects, previews, threading rules, the projection, the blob store. */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { simpleParser } from 'mailparser';
import type { RecordedEvent } from '../../infra/ports/event-store.js';
import type { Doc } from '../../infra/ports/read-store.js';
import { createFsBlobStore } from '../../infra/blobs/fs-blob-store.js';
import { createMailer } from '../../infra/mail/mailer.js';
import { TemporaryMailError } from '../../infra/ports/mailer.js';
import { attemptsWithin, RETRY_FOR_MS } from '../../services/mail/delivery.js';
import { mailProjection, EMAIL_THREADS, EMAIL_MESSAGES, PARTICIPANTS_KEPT, type ThreadDoc, type MessageDoc } from '../../projections/mail/index.js';
import { decideThread, mayDependOn, THREAD_FALLBACK_WINDOW_MS, type ThreadLookup } from '../../services/mail/threading.js';
import { addressKey, htmlToText, messageIds, normaliseSubject, parseAddressList, participantsKey, previewOf, replySubject, safeFilename, trimReferences } from '../../services/mail/text.js';
import type { EmailReceivedData } from '../../services/mail/events.js';

describe('addresses', () => {
  test('one address, a comma-separated list, display names and arrays are accepted; duplicates dropped', () => {
    expect(parseAddressList('a@example.com').addresses).toEqual([{ address: 'a@example.com', name: '' }]);
    expect(parseAddressList('Ann <Ann@Example.com>, b@example.com , a@example.com').addresses.map((a) => a.address)).toEqual([
      'ann@example.com',
      'b@example.com',
      'a@example.com',
    ]);
    expect(parseAddressList(['x@example.com', 'x@example.com, y@example.com']).addresses).toHaveLength(2);
    expect(parseAddressList('').addresses).toEqual([]);
  });

  test('invalid entries are reported, valid ones kept', () => {
    const r = parseAddressList('ok@example.com, nope, bad@, @x.com, x@-bad-.com');
    expect(r.addresses.map((a) => a.address)).toEqual(['ok@example.com']);
    expect(r.invalid.length).toBeGreaterThanOrEqual(3);
  });

  test('a malformed list is refused, never read as other recipients', () => {
    // Two addresses without a comma, an address as an unquoted display name, a smuggled header.
    for (const input of ['x@ext.com y@ext.com', 'x@ext.com <y@ext.com>', 'x@ext.com\r\nBcc: evil@ext.com', 'x@ext.com\nBcc: evil@ext.com', 'a@x.com\u0000']) {
      const r = parseAddressList(input);
      expect([input, r.invalid.length > 0]).toEqual([input, true]);
      expect(r.addresses.map((a) => a.address)).not.toContain('evil@ext.com');
    }
    // A quoted display name may contain @; groups and semicolons are lists.
    expect(parseAddressList('"a@b.com" <c@d.com>').addresses).toEqual([{ address: 'c@d.com', name: 'a@b.com' }]);
    expect(parseAddressList('Team: a@x.com, b@x.com;').addresses).toHaveLength(2);
  });

  test('a file name keeps no control character, path separator, quote or bidirectional override', () => {
    expect(safeFilename('a\r\nX-Evil: y.txt')).toBe('a__X-Evil: y.txt');
    expect(safeFilename('invoice\u202efdp.exe')).toBe('invoice_fdp.exe'); // shown as "invoiceexe.pdf" otherwise
    expect(safeFilename('x\u2067y\u2069.txt')).toBe('x_y_.txt');
    expect(safeFilename('../"etc"\\passwd')).toBe('..__etc__passwd');
    expect(safeFilename('  ')).toBe('attachment');
    expect([safeFilename('..'), safeFilename('.')]).toEqual(['__', '_']); // a name that is a directory's
    expect(safeFilename('.profile')).toBe('.profile');
    expect(safeFilename('Résumé 日本.pdf')).toBe('Résumé 日本.pdf');
  });

  test('a display name goes with an address in angle brackets, or as a comment after it; a stray word is refused', () => {
    // addressparser read these as a name plus an address: `a b@c.com`, a typo, went to b@c.com.
    for (const input of ['a b@c.com', 'a@b.com x', 'x a@b.com', '"Ann" ann@x.com', 'ok@x.com, Ann ann@x.com']) {
      expect([input, parseAddressList(input).invalid]).toEqual([input, [input]]);
    }
    for (const [input, name] of [['Ann Lee <ann@x.com>', 'Ann Lee'], ['Ann<ann@x.com>', 'Ann'], ['Ann < Ann@X.com >', 'Ann'], ['ann@x.com (Ann)', 'Ann'], ['"Lee, Ann" <ann+tag@x.com>', 'Lee, Ann']]) {
      const r = parseAddressList(input);
      expect([input, r.invalid, r.addresses.map((a) => a.name)]).toEqual([input, [], [name]]);
    }
  });

  test('an internationalised domain is kept in its ASCII form; a needless quoted local part is unquoted', () => {
    expect(addressKey('User@Bücher.DE')).toBe('user@xn--bcher-kva.de');
    expect(addressKey('\u212Aim@Example.com')).toBe('\u212Aim@example.com'); // the Kelvin sign is no k
    expect(addressKey('\u212Aim@Example.com')).not.toBe(addressKey('kim@example.com'));
    expect(parseAddressList('Jörg <jm@bücher.de>').addresses).toEqual([{ address: 'jm@xn--bcher-kva.de', name: 'Jörg' }]);
    expect(addressKey('"alice"@example.com')).toBe('alice@example.com');
    expect(addressKey('"a b"@example.com')).toBe('"a b"@example.com'); // the quotes are needed
    // RFC 5322 §4.4: white space around the @ (and dots) of an unquoted address is none of it; nor is an invisible character of a domain.
    expect(addressKey('Ann . Lee @ Example.com')).toBe('ann.lee@example.com');
    expect(addressKey('ann@ex\u200dam\u200bple.com')).toBe('ann@example.com');
    expect(parseAddressList('jürgen@exämple.de').invalid).toEqual(['jürgen@exämple.de']); // a UTF-8 local part needs SMTPUTF8
  });
});

describe('subjects and bodies', () => {
  test('RFC 5322 §3.6.5: "Re: " is added once', () => {
    expect(replySubject('Hello')).toBe('Re: Hello');
    expect(replySubject('Re: Hello')).toBe('Re: Hello');
    expect(replySubject('RE:Hello')).toBe('RE:Hello');
    expect(replySubject('  ')).toBe('Re:');
  });

  test('the fallback key strips Re:/Fwd: chains (also Outlook\'s localised ones), list tags, whitespace and case', () => {
    expect(normaliseSubject('Re: Fwd: RE:  Project   Kickoff ')).toBe('project kickoff');
    expect(normaliseSubject('AW: Sv: status')).toBe('status');
    expect(normaliseSubject('WG: TR: Re[2]: status')).toBe('status');
    expect(normaliseSubject('[dev] Re: [dev] status')).toBe('status');
    expect(normaliseSubject('[dev] status')).toBe('status');
    expect(normaliseSubject('Regarding: status')).toBe('regarding: status');
  });

  test('a long References chain keeps its root and the newest ids', () => {
    const ids = Array.from({ length: 50 }, (_, i) => `<${i}@x>`);
    expect(trimReferences(ids.slice(0, 20))).toEqual(ids.slice(0, 20));
    expect(trimReferences(ids)).toEqual([ids[0], ...ids.slice(31)]);
    expect(trimReferences(ids)).toHaveLength(20);
    expect(trimReferences(ids, 10)).toEqual([ids[0], ...ids.slice(41)]);
    // A header of 100,000 ids (1 MiB, what the parser allows) is read in one pass.
    const many = Array.from({ length: 100_000 }, (_, i) => `<${i}@x>`);
    expect(messageIds(`${many.join(' ')} ${many[5]}`)).toHaveLength(100_000);
  });

  test('HTML becomes readable text; previews are collapsed and bounded', () => {
    expect(htmlToText('<style>p{}</style><p>Hi &amp; bye</p><p>x&#33;<br>y</p>')).toBe('Hi & bye\nx!\ny');
    // Links keep their targets; table cells stay apart.
    expect(htmlToText('<p>Click <a href="https://example.com/verify?token=abc&amp;x=1">here</a> to verify.</p>')).toBe('Click here (https://example.com/verify?token=abc&x=1) to verify.');
    expect(htmlToText('<a href="https://example.com">https://example.com</a> <a href=\'mailto:a@b.c\'>a@b.c</a> <a href="#top">top</a>')).toBe('https://example.com a@b.c top');
    expect(htmlToText('<table><tr><td>a</td><td>b</td></tr><tr><th>c</th> <th>d</th></tr></table>')).toBe('a\tb\nc\td');
    expect(htmlToText('<A HREF="https://x.example/">see <b>this</b></A>, <a href=https://y.example>https://y.example</a>')).toBe('see this (https://x.example/), https://y.example');
    expect(htmlToText('<head><title>t</title></head><script>var a = "<p>";</script>1 &lt; 2<br/>x <!-- c --> y')).toBe('1 < 2\nx  y');
    expect(htmlToText('a < b and c')).toBe('a < b and c');
    // HTML5 lets `</head>` out; an element name is whole (`</header>`, `</abbr>` end nothing else).
    expect(htmlToText('<!DOCTYPE html><html><head><meta charset="utf-8"><title>Invoice</title><body><p>Your invoice #42 is attached.</p></body></html>')).toBe('Your invoice #42 is attached.');
    expect(htmlToText('<p>Hi</p><style>body{color:red}<p>never shown</p>')).toBe('Hi'); // a style never closed runs to the end, as in a browser
    expect(htmlToText('<p>A</p><style-guide>x</style-guide><p>B</p>')).toBe('A\nxB'); // a custom element is no <style>
    expect(htmlToText('<html><head/><body>Hello there</body></html>')).toBe('Hello there');
    expect(htmlToText('<head><title>T</title></head><header>Top</header><p>body</p>')).toBe('Topbody');
    expect(htmlToText('<a href="https://x.com">foo <abbr>AB</abbr> bar</a> tail')).toBe('foo AB bar (https://x.com) tail');
    expect(previewOf('a\n\n  b\tc')).toBe('a b c');
    expect(previewOf(null, '<p>from html</p>')).toBe('from html');
    const long = previewOf('word '.repeat(100));
    expect(long.length).toBeLessThanOrEqual(200);
    expect(long.endsWith('…')).toBe(true);
  });

  test('malformed HTML costs time in proportion to its size (unclosed tags, long runs): no backtracking blow-up', () => {
    // Each took minutes to hours with regular expressions over the whole body (a frozen process).
    const hostile = [
      '<a href=x '.repeat(50_000),
      '<a href="h" '.repeat(40_000),
      '<script '.repeat(50_000),
      '<'.repeat(500_000),
      `x${' '.repeat(500_000)}y\n`.repeat(2),
      `<a href="https://e.x/">${'<a href="https://e.x/">'.repeat(30_000)}</a>`,
      `&${'a'.repeat(500_000)}`,
      '<script>'.repeat(100_000),
      `${'<head>'.repeat(100_000)}${'</headx'.repeat(50_000)}`,
      `<style>${'</stylex>'.repeat(100_000)}`,
      `${'<a href="https://x">'.repeat(50_000)}${'</abbr>'.repeat(50_000)}`,
    ];
    for (const html of hostile) expect(typeof htmlToText(html)).toBe('string'); // jest's 5 s timeout is the bound
    expect(previewOf(null, '<a href=x '.repeat(50_000))).toMatch(/^<a href=x <a href=x/); // no tag ever closes: text
  });

  test('a long body previews exactly as its whole text would (only its start is read)', () => {
    const whole = (text: string) => {
      const collapsed = text.replace(/\s+/g, ' ').trim();
      return collapsed.length <= 200 ? collapsed : `${collapsed.slice(0, 199).trimEnd()}…`;
    };
    const bodies = [
      'word '.repeat(20_000),
      `${' '.repeat(5_000)}${'x'.repeat(150)}${'\n'.repeat(10_000)}${'y'.repeat(100)}`,
      `${'a \t\n'.repeat(250)}${'b'.repeat(60)}`,
      `${'z'.repeat(199)}${' '.repeat(3_000)}tail`,
      `${'z'.repeat(198)}${' '.repeat(3_000)}`,
      `${' '.repeat(799)}${'q'.repeat(201)}`,
    ];
    for (const body of bodies) expect(previewOf(body)).toBe(whole(body));
  });

  test('a preview is one line of text: white space and control characters collapse to a space', () => {
    expect(previewOf('body\u0000nul\r\n\tnext\u0007 \u0085line')).toBe('body nul next line');
  });

  test('a preview never ends in half a surrogate pair (an emoji cut in two)', () => {
    for (const lead of ['', 'x']) {
      const preview = previewOf(`${lead}${'😀'.repeat(300)}`);
      expect(/[\uD800-\uDFFF]/u.test(preview)).toBe(false);
      expect(preview.endsWith('😀…')).toBe(true);
    }
  });

  test('Message-IDs are extracted from header values and lists', () => {
    expect(messageIds('<a@x> <b@y>')).toEqual(['<a@x>', '<b@y>']);
    expect(messageIds(['<a@x>', '<a@x>'])).toEqual(['<a@x>']);
    expect(messageIds('bare@id')).toEqual(['<bare@id>']);
    expect(messageIds(undefined)).toEqual([]);
    // Longer than a header line may be (RFC 5322 §2.1.1): no id, and nothing kept of it.
    expect(messageIds(`<${'x'.repeat(1000)}@y> <ok@y>`)).toEqual(['<ok@y>']);
  });

  test('participants key ignores the own inbox, case and order', () => {
    expect(participantsKey(['B@x.com', 'me@agents.localhost', 'a@x.com'], 'ME@agents.localhost')).toBe('a@x.com,b@x.com');
  });
});

describe('threading (RFC 5322 §3.6.4, fallback)', () => {
  const known = new Map<string, string>([['<root@x>', 'thread-root']]);
  const subjects: { key: string; participants: string; threadId: string; lastMessageAt: string }[] = [
    { key: 'budget', participants: 'carol@x.com', threadId: 'thread-budget', lastMessageAt: '2026-01-01T00:00:00.000Z' },
  ];
  const lookup: ThreadLookup = {
    threadOfMessageId: async (_identity, id) => known.get(id) ?? null,
    latestThreadBySubject: async (_identity, key, participants) => {
      const t = subjects.find((s) => s.key === key && s.participants === participants);
      return t ? { threadId: t.threadId, lastMessageAt: t.lastMessageAt } : null;
    },
  };
  const base = { identityId: 'i', ownInbox: 'me@agents.localhost', internetMessageId: '<new@x>', inReplyTo: null, references: [] as string[], subject: 'Hello', participants: ['carol@x.com', 'me@agents.localhost'], at: '2026-01-02T00:00:00.000Z' };
  const fresh = () => 'new-thread';

  test('In-Reply-To names a known message: its thread', async () => {
    expect(await decideThread(lookup, { ...base, inReplyTo: '<root@x>' }, fresh)).toBe('thread-root');
  });
  test('References are searched from the newest to the oldest', async () => {
    expect(await decideThread(lookup, { ...base, inReplyTo: '<unknown@x>', references: ['<root@x>', '<unknown@x>'] }, fresh)).toBe('thread-root');
  });
  test('a redelivered Message-ID stays in its thread', async () => {
    expect(await decideThread(lookup, { ...base, internetMessageId: '<root@x>' }, fresh)).toBe('thread-root');
  });
  test('fallback: a "Re:" with the same subject and participants within the window joins', async () => {
    expect(await decideThread(lookup, { ...base, subject: 'Re: Budget' }, fresh)).toBe('thread-budget');
  });
  test('fallback needs a reply: the same subject without Re: or reply headers starts a thread', async () => {
    expect(await decideThread(lookup, { ...base, subject: 'Budget' }, fresh)).toBe('new-thread');
  });
  test('fallback needs the same participants and the time window', async () => {
    expect(await decideThread(lookup, { ...base, subject: 'Re: Budget', participants: ['dave@x.com'] }, fresh)).toBe('new-thread');
    const late = new Date(Date.parse(subjects[0].lastMessageAt) + THREAD_FALLBACK_WINDOW_MS + 1).toISOString();
    expect(await decideThread(lookup, { ...base, subject: 'Re: Budget', at: late }, fresh)).toBe('new-thread');
  });
  test('a decision waits for unseen earlier messages only when it names one or may fall back to the subject', () => {
    expect(mayDependOn(base, [])).toBe(false);
    expect(mayDependOn(base, ['<other@x>', null])).toBe(false); // a new conversation: decided at once
    expect(mayDependOn({ ...base, inReplyTo: '<other@x>' }, ['<other@x>'])).toBe(true);
    expect(mayDependOn({ ...base, references: ['<a@x>', '<other@x>'] }, ['<other@x>'])).toBe(true);
    expect(mayDependOn(base, ['<new@x>'])).toBe(true); // its own Message-ID: a redelivery
    expect(mayDependOn({ ...base, subject: 'Re: anything' }, ['<unrelated@x>'])).toBe(true); // the subject fallback reads every thread
    expect(mayDependOn({ ...base, inReplyTo: '<unknown@x>' }, [null])).toBe(true); // reply headers → fallback
  });
});

describe('mail projection', () => {
  let position = 0;
  const recorded = (type: string, data: unknown, stream: string): RecordedEvent => ({
    id: `e${++position}`,
    type,
    stream,
    revision: position,
    position: String(position),
    data,
    metadata: {},
    recordedAt: new Date().toISOString(),
  });
  const received = (messageId: string, threadId: string, at: string): EmailReceivedData => ({
    identityId: 'id1',
    inbox: 'me@agents.localhost',
    messageId,
    threadId,
    internetMessageId: `<${messageId}@x>`,
    inReplyTo: null,
    references: [],
    from: { address: 'carol@x.com', name: 'Carol' },
    to: [{ address: 'me@agents.localhost', name: '' }],
    cc: [],
    replyTo: [],
    subject: 'Hi',
    text: 'hello',
    html: null,
    textBlob: null,
    htmlBlob: null,
    preview: `preview ${messageId}`,
    attachments: [],
    raw: null,
    via: 'smtp',
    sourceMessageId: null,
    date: null,
    at,
  });

  function applyAll(docs: Map<string, Doc>, e: RecordedEvent): void {
    for (const u of mailProjection.apply(e)) {
      const key = `${u.collection}/${u.id}`;
      const next = u.evolve(docs.get(key) ?? null);
      if (next) docs.set(key, next);
      else docs.delete(key);
    }
  }

  test('given two received messages, when one is marked read, then the thread counts follow', () => {
    const docs = new Map<string, Doc>();
    applyAll(docs, recorded('EmailReceived', received('m1', 't1', '2026-01-01T00:00:00.000Z'), 'mailbox-id1'));
    applyAll(docs, recorded('EmailReceived', received('m2', 't1', '2026-01-01T00:01:00.000Z'), 'mailbox-id1'));
    let thread = docs.get(`${EMAIL_THREADS}/t1`) as ThreadDoc;
    expect(thread).toMatchObject({ messageCount: 2, unreadCount: 2, unread: true, preview: 'preview m2', lastMessageAt: '2026-01-01T00:01:00.000Z' });
    applyAll(docs, recorded('EmailMarkedRead', { identityId: 'id1', messages: [{ messageId: 'm1', threadId: 't1' }], at: 'x' }, 'mailbox-id1'));
    thread = docs.get(`${EMAIL_THREADS}/t1`) as ThreadDoc;
    expect(thread).toMatchObject({ unreadCount: 1, unread: true });
    expect((docs.get(`${EMAIL_MESSAGES}/m1`) as MessageDoc).read).toBe(true);
  });

  test('two readers marking the same message count it once; marking it unread again counts it again', () => {
    const docs = new Map<string, Doc>();
    const mark = (type: string, ids: string[]) =>
      recorded(type, { identityId: 'id1', messages: ids.map((messageId) => ({ messageId, threadId: 't2' })), at: 'x' }, 'mailbox-id1');
    applyAll(docs, recorded('EmailReceived', received('a1', 't2', '2026-01-01T00:00:00.000Z'), 'mailbox-id1'));
    applyAll(docs, recorded('EmailReceived', received('a2', 't2', '2026-01-01T00:01:00.000Z'), 'mailbox-id1'));
    applyAll(docs, mark('EmailMarkedRead', ['a1']));
    applyAll(docs, mark('EmailMarkedRead', ['a1'])); // the second reader
    applyAll(docs, recorded('EmailReceived', received('a3', 't2', '2026-01-01T00:02:00.000Z'), 'mailbox-id1'));
    expect(docs.get(`${EMAIL_THREADS}/t2`)).toMatchObject({ messageCount: 3, unreadCount: 2, unread: true });
    applyAll(docs, mark('EmailMarkedRead', ['a1', 'a2', 'a3', 'unknown']));
    expect(docs.get(`${EMAIL_THREADS}/t2`)).toMatchObject({ unreadCount: 0, unread: false });
    applyAll(docs, mark('EmailMarkedUnread', ['a2', 'a2']));
    expect(docs.get(`${EMAIL_THREADS}/t2`)).toMatchObject({ unreadCount: 1, unread: true });
    // A marking that names a message under another thread, or of another identity, moves nothing.
    applyAll(docs, recorded('EmailReceived', received('x1', 't9', '2026-01-01T00:03:00.000Z'), 'mailbox-id1'));
    applyAll(docs, recorded('EmailMarkedRead', { identityId: 'id1', messages: [{ messageId: 'x1', threadId: 't2' }], at: 'x' }, 'mailbox-id1'));
    applyAll(docs, recorded('EmailMarkedRead', { identityId: 'id2', messages: [{ messageId: 'x1', threadId: 't9' }], at: 'x' }, 'mailbox-id2'));
    expect([docs.get(`${EMAIL_THREADS}/t2`)?.unreadCount, docs.get(`${EMAIL_THREADS}/t9`)?.unreadCount, docs.get(`${EMAIL_MESSAGES}/x1`)?.read]).toEqual([1, 1, false]);
  });

  test("a thread's document does not grow with its unread mail, and keeps a bounded list of participants", () => {
    const docs = new Map<string, Doc>();
    const size = () => JSON.stringify(docs.get(`${EMAIL_THREADS}/t3`)).length;
    const from = (i: number) => ({ address: `sender${i}@x.com`, name: '' });
    let sizeOnceFull = 0;
    for (let i = 0; i <= PARTICIPANTS_KEPT * 2; i++) {
      applyAll(docs, recorded('EmailReceived', { ...received(`b${1000 + i}`, 't3', '2026-01-01T00:00:00.000Z'), from: from(i) }, 'mailbox-id1'));
      if (i === PARTICIPANTS_KEPT) sizeOnceFull = size();
    }
    const thread = docs.get(`${EMAIL_THREADS}/t3`) as ThreadDoc;
    expect(thread).toMatchObject({ messageCount: PARTICIPANTS_KEPT * 2 + 1, unreadCount: PARTICIPANTS_KEPT * 2 + 1 });
    expect(thread.participants).toHaveLength(PARTICIPANTS_KEPT);
    expect(thread.participants.slice(0, 2)).toEqual(['sender0@x.com', 'me@agents.localhost']);
    expect(size()).toBe(sizeOnceFull); // a hundred more unread mails, from a hundred more senders
  });

  test('should be idempotent if run twice: the same event applied again changes nothing', () => {
    const docs = new Map<string, Doc>();
    const e = recorded('EmailReceived', received('m9', 't9', '2026-01-01T00:00:00.000Z'), 'mailbox-id1');
    applyAll(docs, e);
    const before = JSON.stringify([...docs]);
    applyAll(docs, e);
    expect(JSON.stringify([...docs])).toBe(before);
    const read = recorded('EmailMarkedUnread', { identityId: 'id1', messages: [{ messageId: 'm9', threadId: 't9' }], at: 'x' }, 'mailbox-id1');
    applyAll(docs, read);
    const after = JSON.stringify([...docs]);
    applyAll(docs, read);
    expect(JSON.stringify([...docs])).toBe(after);
  });
});

describe('file blob store', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ais-blobs-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  test('content-addressed by sha256; put is idempotent; unknown or malformed keys are null', async () => {
    const blobs = createFsBlobStore({ dir });
    const content = Buffer.from('hello blob');
    const ref = await blobs.put(content);
    expect(ref).toEqual({ key: createHash('sha256').update(content).digest('hex'), size: content.length });
    expect(await blobs.put(content)).toEqual(ref);
    expect((await blobs.get(ref.key))?.toString()).toBe('hello blob');
    expect(await blobs.has(ref.key)).toBe(true);
    expect(await blobs.get('0'.repeat(64))).toBeNull();
    expect(await blobs.get('../../etc/passwd')).toBeNull();
    const opened = await blobs.open(ref.key);
    expect(opened?.size).toBe(content.length);
    const chunks: Buffer[] = [];
    for await (const c of opened!.stream) chunks.push(c as Buffer);
    expect(Buffer.concat(chunks).toString()).toBe('hello blob');
    expect(fs.readdirSync(path.join(dir, 'tmp'))).toEqual([]);
  });
});

describe('outbox', () => {
  test('a message file left half-written by a killed process is removed at start; one being written now is not', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ais-outbox-'));
    try {
      const abandoned = path.join(dir, 'old.eml.tmp');
      const inProgress = path.join(dir, 'new.eml.tmp');
      const delivered = path.join(dir, 'kept.eml');
      for (const f of [abandoned, inProgress, delivered]) fs.writeFileSync(f, 'From: x');
      const long = new Date(Date.now() - 5 * 60_000);
      fs.utimesSync(abandoned, long, long);
      fs.utimesSync(delivered, long, long);
      const mailer = createMailer({ relayUrl: null, outboxDir: dir, domain: 'agents.localhost' });
      for (let i = 0; i < 50 && fs.existsSync(abandoned); i++) await new Promise((r) => setTimeout(r, 10));
      expect([fs.existsSync(abandoned), fs.existsSync(inProgress), fs.existsSync(delivered)]).toEqual([false, true, true]);
      await mailer.close();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('input built to make the one thread work for minutes is read in one pass', () => {
  // Each of these took seconds to hours before (an audit measured them); Jest's timeout is the bound.
  test('a bare Message-ID of a hundred thousand @ (one @ per id)', () => {
    expect(messageIds(`${'@'.repeat(400_000)} x`)).toEqual([]);
    expect(messageIds('id@example.com')).toEqual(['<id@example.com>']);
    expect(messageIds('a@b@c')).toEqual([]);
  });

  test('an address list of thousands of entries stops at its limit; invalid entries are said once each, the first 20, cut short', () => {
    const list = Array.from({ length: 3000 }, (_, i) => `a b${i}@x.co`).join(',');
    const capped = parseAddressList(list, 100);
    expect(capped.tooMany).toBe(true);
    const all = parseAddressList('a b@x.co,'.repeat(2000));
    expect(all.invalid).toHaveLength(1); // the same whole part each time: once
    expect(all.invalid[0]).toHaveLength(201);
    const many = parseAddressList(Array.from({ length: 50 }, (_, i) => `bad${i}`).join(', '));
    expect(many.invalid).toHaveLength(20);
  });
});

describe('outbox files', () => {
  test('a subject of many long runs goes out as it is (it folds between them); one with a run longer than a line, as encoded words', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ais-subject-'));
    const mailer = createMailer({ relayUrl: null, outboxDir: dir, domain: 'agents.localhost' });
    try {
      const subject = `${'a'.repeat(977)} `.repeat(1000).trim();
      const sent = await mailer.send({ from: 'a@agents.localhost', to: ['b@example.com'], subject, text: 'x', messageId: '<s1@agents.localhost>', date: '2026-11-29T10:00:00.000Z' });
      expect((await simpleParser(fs.readFileSync(sent.location!))).subject).toBe(subject);
      const unfoldable = `x ${'b'.repeat(2000)}`;
      const encoded = await mailer.send({ from: 'a@agents.localhost', to: ['b@example.com'], subject: unfoldable, text: 'x', messageId: '<s2@agents.localhost>', date: '2026-11-29T10:00:00.000Z' });
      const raw = fs.readFileSync(encoded.location!, 'latin1');
      expect(raw).toMatch(/^Subject: =\?UTF-8\?Q\?/m);
      expect(Math.max(...raw.split('\r\n').map((line) => line.length))).toBeLessThanOrEqual(998);
      expect((await simpleParser(Buffer.from(raw, 'latin1'))).subject).toBe(unfoldable);
    } finally {
      await mailer.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
  test('a message handed over again (a crash before its outcome was recorded) replaces its own file; its Date is when it was composed', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ais-outbox-'));
    const mailer = createMailer({ relayUrl: null, outboxDir: dir, domain: 'agents.localhost' });
    try {
      const mail = { from: 'a@agents.localhost', to: ['b@example.com'], subject: 'Once', text: 'hello', messageId: '<m1@agents.localhost>', date: '2026-11-29T10:00:00.000Z' };
      const first = await mailer.send(mail);
      // A kill while filing it left a temporary file, and two attempts run at once: each has its own.
      fs.writeFileSync(`${first.location!.slice(0, -4)}.eml.tmp`, 'half a mess');
      const [again, concurrent] = await Promise.all([mailer.send(mail), mailer.send(mail)]);
      expect([again.location, concurrent.location]).toEqual([first.location, first.location]);
      await mailer.send({ ...mail, messageId: '<m2@agents.localhost>' });
      expect(fs.readdirSync(dir).filter((f) => f.endsWith('.eml.tmp'))).toHaveLength(1); // the killed one's, removed at the next start when old
      const files = fs.readdirSync(dir).filter((f) => f.endsWith('.eml')).sort();
      expect(files).toHaveLength(2);
      expect(files[0]).toMatch(/^2026-11-29T10-00-00-000Z-[0-9a-f]{32}\.eml$/);
      const parsed = await simpleParser(fs.readFileSync(first.location!));
      expect([parsed.messageId, parsed.date?.toISOString()]).toEqual(['<m1@agents.localhost>', mail.date]);
    } finally {
      await mailer.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('relay', () => {
  test('a relay refusing our login (535) is a temporary failure: the credentials are ours to fix, the mail waits', async () => {
    const { SMTPServer } = await import('smtp-server');
    const relay = new SMTPServer({
      authOptional: false,
      allowInsecureAuth: true,
      disabledCommands: ['STARTTLS'],
      logger: false,
      onAuth: (_auth, _session, cb) => cb(Object.assign(new Error('Invalid login'), { responseCode: 535 })),
    });
    await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', () => resolve()));
    const port = (relay.server.address() as { port: number }).port;
    const mailer = createMailer({ relayUrl: `smtp://user:wrong@127.0.0.1:${port}`, outboxDir: '/nonexistent', domain: 'agents.localhost' });
    try {
      await expect(mailer.verify()).rejects.toThrow(/Invalid login/);
      const err = await mailer.send({ from: 'a@agents.localhost', to: ['b@example.com'], subject: 's', text: 't' }).catch((e) => e);
      expect(err).toBeInstanceOf(TemporaryMailError);
      // No credentials where the relay wants some: 530 at MAIL FROM, our setup again.
      const anonymous = createMailer({ relayUrl: `smtp://127.0.0.1:${port}`, outboxDir: '/nonexistent', domain: 'agents.localhost' });
      const refused = await anonymous.send({ from: 'a@agents.localhost', to: ['b@example.com'], subject: 's', text: 't' }).catch((e) => e);
      await anonymous.close();
      expect([refused instanceof TemporaryMailError, (refused.cause as { responseCode?: number })?.responseCode]).toEqual([true, 530]);
    } finally {
      await mailer.close();
      await new Promise<void>((resolve) => relay.close(() => resolve()));
    }
  });
});

describe('delivery retry schedule', () => {
  test('a temporary failure is retried for a day: 2 s doubling to 15 min, then every 15 min', () => {
    const attempts = attemptsWithin(RETRY_FOR_MS, 2_000, 15 * 60_000);
    const waits = Array.from({ length: attempts - 1 }, (_, i) => Math.min(15 * 60_000, 2_000 * 2 ** i));
    const total = waits.reduce((a, b) => a + b, 0);
    expect(RETRY_FOR_MS).toBe(24 * 3600_000);
    expect(total).toBeGreaterThanOrEqual(RETRY_FOR_MS);
    expect(total - waits[waits.length - 1]!).toBeLessThan(RETRY_FOR_MS); // one attempt fewer would give up early
    expect(attemptsWithin(1_022_000, 2_000, 15 * 60_000)).toBe(10); // 2 + 4 + ... + 512 s
  });
});
