import type { ServerResponse } from 'node:http';
import { apiVersionOf, type KubeObject, type ResourceType, typeKey } from './resources.js';
import type { FieldMatcher, Matcher } from './selectors.js';
import { ApiError, statusObject, writeEvent } from './wire.js';

/**
 * The API server double's event log and open watches: a watch from a resourceVersion is
 * replayed from the bounded log (`410 Gone` as an ERROR event once compacted past it), one
 * without a version starts with synthetic ADDED events, an object leaving a watch's selector
 * is DELETED to it, and a watch that allows bookmarks gets BOOKMARK events.
 */

export interface LoggedEvent {
  rv: number;
  key: string;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  object: KubeObject;
  /** The object before a MODIFIED, for selector transitions on replay. */
  previous?: KubeObject;
}

interface Watcher {
  key: string;
  namespace: string | undefined;
  labels: Matcher;
  fields: FieldMatcher;
  res: ServerResponse;
  timers: NodeJS.Timeout[];
}

export interface WatchHubOptions {
  /** Events kept for watches that resume from a resourceVersion. */
  maxEvents: number;
  bookmarkIntervalMs: number;
  /** The store's current resourceVersion (bookmarks carry it). */
  resourceVersion: () => number;
  /** The object as a client sees it (kind and apiVersion set). */
  withKind: (type: ResourceType, o: KubeObject) => KubeObject;
}

export class WatchHub {
  #events: LoggedEvent[] = [];
  /** Watches from below this resourceVersion get 410 Gone. */
  #compacted = 1;
  readonly #watchers = new Set<Watcher>();

  constructor(private readonly opts: WatchHubOptions) {}

  /** Forgets the log: a watch resuming from a version below `nextRv` gets 410 Gone. */
  compact(nextRv: number): void {
    this.#events = [];
    this.#compacted = nextRv;
  }

  /** Ends every open watch. */
  closeAll(): void {
    for (const w of this.#watchers) this.#end(w);
  }

  /**
   * Serves a watch on `res`: `current` lists the matching objects for a watch that gives no
   * resourceVersion (or 0), which starts with them as ADDED.
   */
  watch(
    type: ResourceType,
    namespace: string | undefined,
    sel: { labels: Matcher; fields: FieldMatcher },
    q: URLSearchParams,
    res: ServerResponse,
    current: () => KubeObject[],
  ): void {
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    res.flushHeaders();
    const w: Watcher = { key: typeKey(type), namespace, ...sel, res, timers: [] };
    const from = q.get('resourceVersion') ?? '';
    if (from === '' || from === '0') {
      for (const o of current()) writeEvent(res, 'ADDED', this.opts.withKind(type, o));
    } else {
      const rv = Number(from);
      const refused =
        !Number.isInteger(rv) || rv < 0
          ? new ApiError(400, 'BadRequest', `invalid resourceVersion ${from}`)
          : rv + 1 < this.#compacted
            ? new ApiError(410, 'Expired', `too old resource version: ${rv} (${this.#compacted - 1})`)
            : undefined;
      if (refused !== undefined) {
        writeEvent(res, 'ERROR', statusObject(refused));
        res.end();
        return;
      }
      for (const e of this.#events) if (e.rv > rv && e.key === w.key) this.#deliver(w, type, e);
    }
    this.#watchers.add(w);
    res.on('close', () => this.#end(w));
    const timeout = Number(q.get('timeoutSeconds') ?? '0');
    if (timeout > 0) w.timers.push(setTimeout(() => this.#end(w), timeout * 1000).unref());
    if (q.get('allowWatchBookmarks') === 'true') {
      const bookmark = () =>
        writeEvent(res, 'BOOKMARK', {
          kind: type.kind,
          apiVersion: apiVersionOf(type),
          metadata: { resourceVersion: String(this.opts.resourceVersion()) },
        });
      w.timers.push(setInterval(bookmark, this.opts.bookmarkIntervalMs).unref());
    }
  }

  /** Logs an event (dropping the oldest past `maxEvents`) and sends it to the type's watches. */
  emit(type: ResourceType, e: Omit<LoggedEvent, 'key'>): void {
    const logged = { ...e, key: typeKey(type) };
    this.#events.push(logged);
    if (this.#events.length > this.opts.maxEvents) {
      const dropped = this.#events.splice(0, this.#events.length - this.opts.maxEvents);
      this.#compacted = (dropped.at(-1)?.rv ?? 0) + 1;
    }
    for (const w of this.#watchers) if (w.key === logged.key) this.#deliver(w, type, logged);
  }

  #end(w: Watcher): void {
    if (!this.#watchers.delete(w)) return;
    for (const t of w.timers) clearTimeout(t);
    w.res.end();
  }

  /** Sends one logged event to one watcher, as its selectors see it. */
  #deliver(w: Watcher, type: ResourceType, e: LoggedEvent): void {
    const match = (o: KubeObject | undefined) =>
      o !== undefined &&
      (w.namespace === undefined || o.metadata.namespace === w.namespace) &&
      w.labels(o.metadata.labels ?? {}) &&
      w.fields(o);
    const now = match(e.object);
    const before = e.type === 'MODIFIED' ? match(e.previous) : now;
    let kind: LoggedEvent['type'] | undefined;
    if (e.type === 'MODIFIED')
      kind = now && before ? 'MODIFIED' : now ? 'ADDED' : before ? 'DELETED' : undefined;
    else kind = now ? e.type : undefined;
    if (kind !== undefined) writeEvent(w.res, kind, this.opts.withKind(type, e.object));
  }
}
