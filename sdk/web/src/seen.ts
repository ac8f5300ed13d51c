// The seen-set: the ids of notifications this browser has already shown,
// kept in IndexedDB so it survives service-worker restarts (a browser stops
// an idle service worker after seconds and starts a new one per push).
//
// Guarantees, with what each assumes:
//   - claim(id) returns true for exactly one of any number of calls with one
//     id, concurrent or not, while the id is in the set: each claim is one
//     readwrite transaction on the "seen" store that reads the id and writes
//     it, and IndexedDB runs readwrite transactions whose scopes overlap one
//     after another, in the order they were created (the IndexedDB spec's
//     transaction scheduling). Shown by test/seen.test.ts ("two claims of one
//     id at once") on fake-indexeddb and by the Chromium test on a real one.
//   - The set is bounded: an entry older than maxAgeMs is forgotten, and
//     when more than maxEntries remain the oldest are forgotten. A push of a
//     forgotten id is shown again: herald's own dedupe window and the push
//     service's retry horizon (hours) are far inside the default age (7 days).
export interface SeenOptions {
  /** IndexedDB database name (default "herald"). */
  dbName?: string;
  /** Entries older than this are forgotten (default 7 days). */
  maxAgeMs?: number;
  /** At most this many entries are kept (default 1000). */
  maxEntries?: number;
  /** The IndexedDB factory (default globalThis.indexedDB). */
  indexedDB?: IDBFactory;
  /** The clock, in ms since the epoch (default Date.now). */
  now?: () => number;
}

interface Entry {
  id: string;
  at: number;
}

const store = "seen";
const byAge = "at";

export const defaultMaxAgeMs = 7 * 24 * 60 * 60 * 1000;
export const defaultMaxEntries = 1000;

function req<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

function done(tx: IDBTransaction): Promise<void> {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error ?? new Error("herald: seen-set transaction aborted"));
  });
}

export class SeenSet {
  private readonly dbName: string;
  private readonly maxAgeMs: number;
  private readonly maxEntries: number;
  private readonly idb: IDBFactory;
  private readonly now: () => number;
  private db?: Promise<IDBDatabase>;

  constructor(opts: SeenOptions = {}) {
    this.dbName = opts.dbName ?? "herald";
    this.maxAgeMs = opts.maxAgeMs ?? defaultMaxAgeMs;
    this.maxEntries = opts.maxEntries ?? defaultMaxEntries;
    const idb = opts.indexedDB ?? (globalThis as { indexedDB?: IDBFactory }).indexedDB;
    if (!idb) throw new Error("herald: no IndexedDB in this context");
    this.idb = idb;
    this.now = opts.now ?? Date.now;
  }

  private open(): Promise<IDBDatabase> {
    if (!this.db) {
      const r = this.idb.open(this.dbName, 1);
      r.onupgradeneeded = () => {
        const s = r.result.createObjectStore(store, { keyPath: "id" });
        s.createIndex(byAge, "at");
      };
      this.db = req(r).catch((err) => {
        this.db = undefined;
        throw new Error(`herald: open seen-set ${this.dbName}: ${err}`);
      });
    }
    return this.db;
  }

  /**
   * Records id as seen and returns true if it was not seen yet (within the
   * age bound); returns false, recording nothing, if it was. One readwrite
   * transaction: concurrent claims of one id are serialised by IndexedDB.
   */
  async claim(id: string): Promise<boolean> {
    const db = await this.open();
    const now = this.now();
    const tx = db.transaction(store, "readwrite");
    const s = tx.objectStore(store);
    const finished = done(tx);
    const prev = (await req(s.get(id))) as Entry | undefined;
    const fresh = prev === undefined || prev.at < now - this.maxAgeMs;
    if (fresh) {
      s.put({ id, at: now } satisfies Entry);
      await this.prune(s, now);
    }
    await finished;
    return fresh;
  }

  /** Whether id is in the set (within the age bound). */
  async has(id: string): Promise<boolean> {
    const db = await this.open();
    const tx = db.transaction(store, "readonly");
    const e = (await req(tx.objectStore(store).get(id))) as Entry | undefined;
    return e !== undefined && e.at >= this.now() - this.maxAgeMs;
  }

  /** The number of entries kept. */
  async size(): Promise<number> {
    const db = await this.open();
    return req(db.transaction(store, "readonly").objectStore(store).count());
  }

  // prune forgets entries older than the age bound, then the oldest beyond
  // maxEntries, inside the claiming transaction.
  private async prune(s: IDBObjectStore, now: number): Promise<void> {
    const idx = s.index(byAge);
    const old = await req(idx.getAllKeys(IDBKeyRange.upperBound(now - this.maxAgeMs, true)));
    for (const k of old) s.delete(k);
    const excess = (await req(s.count())) - this.maxEntries;
    if (excess <= 0) return;
    const oldest = await req(idx.getAllKeys(null, excess));
    for (const k of oldest) s.delete(k);
  }

  /** Closes the database (a new claim opens it again). */
  async close(): Promise<void> {
    const db = this.db;
    this.db = undefined;
    if (db) (await db).close();
  }
}
