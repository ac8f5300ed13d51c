"use strict";
(() => {
  // src/push.ts
  function parsePayload(text) {
    if (!text) return void 0;
    let v;
    try {
      v = JSON.parse(text);
    } catch {
      return void 0;
    }
    if (typeof v !== "object" || v === null) return void 0;
    const o = v;
    if (typeof o.id !== "string" || o.id === "" || typeof o.title !== "string") return void 0;
    const p = { id: o.id, title: o.title };
    if (typeof o.body === "string") p.body = o.body;
    if (typeof o.url === "string") p.url = o.url;
    return p;
  }
  async function handlePush(text, deps) {
    const p = parsePayload(text);
    if (!p) return "invalid";
    if (!await deps.seen.claim(p.id)) return "duplicate";
    await deps.show(p.title, { tag: p.id, body: p.body, data: p });
    return "shown";
  }

  // src/seen.ts
  var store = "seen";
  var byAge = "at";
  var defaultMaxAgeMs = 7 * 24 * 60 * 60 * 1e3;
  var defaultMaxEntries = 1e3;
  function req(r) {
    return new Promise((resolve, reject) => {
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
  }
  function done(tx) {
    return new Promise((resolve, reject) => {
      tx.oncomplete = () => resolve();
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error ?? new Error("herald: seen-set transaction aborted"));
    });
  }
  var SeenSet = class {
    constructor(opts = {}) {
      this.dbName = opts.dbName ?? "herald";
      this.maxAgeMs = opts.maxAgeMs ?? defaultMaxAgeMs;
      this.maxEntries = opts.maxEntries ?? defaultMaxEntries;
      const idb = opts.indexedDB ?? globalThis.indexedDB;
      if (!idb) throw new Error("herald: no IndexedDB in this context");
      this.idb = idb;
      this.now = opts.now ?? Date.now;
    }
    open() {
      if (!this.db) {
        const r = this.idb.open(this.dbName, 1);
        r.onupgradeneeded = () => {
          const s = r.result.createObjectStore(store, { keyPath: "id" });
          s.createIndex(byAge, "at");
        };
        this.db = req(r).catch((err) => {
          this.db = void 0;
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
    async claim(id) {
      const db = await this.open();
      const now = this.now();
      const tx = db.transaction(store, "readwrite");
      const s = tx.objectStore(store);
      const finished = done(tx);
      const prev = await req(s.get(id));
      const fresh = prev === void 0 || prev.at < now - this.maxAgeMs;
      if (fresh) {
        s.put({ id, at: now });
        await this.prune(s, now);
      }
      await finished;
      return fresh;
    }
    /** Whether id is in the set (within the age bound). */
    async has(id) {
      const db = await this.open();
      const tx = db.transaction(store, "readonly");
      const e = await req(tx.objectStore(store).get(id));
      return e !== void 0 && e.at >= this.now() - this.maxAgeMs;
    }
    /** The number of entries kept. */
    async size() {
      const db = await this.open();
      return req(db.transaction(store, "readonly").objectStore(store).count());
    }
    // prune forgets entries older than the age bound, then the oldest beyond
    // maxEntries, inside the claiming transaction.
    async prune(s, now) {
      const idx = s.index(byAge);
      const old = await req(idx.getAllKeys(IDBKeyRange.upperBound(now - this.maxAgeMs, true)));
      for (const k of old) s.delete(k);
      const excess = await req(s.count()) - this.maxEntries;
      if (excess <= 0) return;
      const oldest = await req(idx.getAllKeys(null, excess));
      for (const k of oldest) s.delete(k);
    }
    /** Closes the database (a new claim opens it again). */
    async close() {
      const db = this.db;
      this.db = void 0;
      if (db) (await db).close();
    }
  };

  // src/sw.ts
  var seen = new SeenSet();
  async function onPush(text) {
    let outcome;
    try {
      outcome = await handlePush(text, {
        seen,
        show: (title, options) => self.registration.showNotification(title, options)
      });
    } catch (err) {
      console.error("herald: push", err);
      outcome = "error";
    }
    const id = parsePayload(text)?.id;
    for (const c of await self.clients.matchAll({ type: "window", includeUncontrolled: true })) {
      c.postMessage({ herald: "push", id, outcome });
    }
  }
  self.addEventListener("push", (event) => {
    event.waitUntil(onPush(event.data?.text()));
  });
  self.addEventListener("notificationclick", (event) => {
    event.notification.close();
    const url = event.notification.data?.url;
    if (url) event.waitUntil(self.clients.openWindow(url).then(() => void 0));
  });
})();
