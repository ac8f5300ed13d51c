// The device record: what the page-side helper learnt when it registered
// this browser with herald (herald's base URL, the device's ids and its
// receipt token), kept in IndexedDB where the service worker reads it to
// send receipts and to re-register after pushsubscriptionchange.
//
// The receipt token is a bearer credential for this device's receipts and
// subscription only (POST /v1/receipts, PUT /v1/device/webpush); it is
// stored as any same-origin script can read it, which is the same trust a
// page already has over its own service worker.

export interface DeviceRecord {
  /** herald's base URL (no trailing slash). */
  base: string;
  /** The device's receipt token, from its registration's answer. */
  token: string;
  userId?: string;
  deviceId?: string;
}

export interface DeviceStoreOptions {
  /** IndexedDB database name (default "herald-device"). */
  dbName?: string;
  /** The IndexedDB factory (default globalThis.indexedDB). */
  indexedDB?: IDBFactory;
}

const store = "device";
const key = "current";

function req<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

export class DeviceStore {
  private readonly dbName: string;
  private readonly idb: IDBFactory;
  private db?: Promise<IDBDatabase>;

  constructor(opts: DeviceStoreOptions = {}) {
    this.dbName = opts.dbName ?? "herald-device";
    const idb = opts.indexedDB ?? (globalThis as { indexedDB?: IDBFactory }).indexedDB;
    if (!idb) throw new Error("herald: no IndexedDB in this context");
    this.idb = idb;
  }

  private open(): Promise<IDBDatabase> {
    if (!this.db) {
      const r = this.idb.open(this.dbName, 1);
      r.onupgradeneeded = () => {
        r.result.createObjectStore(store);
      };
      this.db = req(r).catch((err) => {
        this.db = undefined;
        throw new Error(`herald: open device store ${this.dbName}: ${err}`);
      });
    }
    return this.db;
  }

  /** The device record, or undefined before the first registration. */
  async get(): Promise<DeviceRecord | undefined> {
    const db = await this.open();
    return (await req(db.transaction(store, "readonly").objectStore(store).get(key))) as DeviceRecord | undefined;
  }

  /** Replaces the device record. */
  async put(d: DeviceRecord): Promise<void> {
    const db = await this.open();
    const tx = db.transaction(store, "readwrite");
    tx.objectStore(store).put(d, key);
    await new Promise<void>((resolve, reject) => {
      tx.oncomplete = () => resolve();
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error ?? new Error("herald: device store transaction aborted"));
    });
  }

  /** Closes the database (the next call opens it again). */
  async close(): Promise<void> {
    const db = this.db;
    this.db = undefined;
    if (db) (await db).close();
  }
}
