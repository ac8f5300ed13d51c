"use strict";
(() => {
  // src/device.ts
  var store = "device";
  var key = "current";
  function req(r) {
    return new Promise((resolve, reject) => {
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
  }
  var DeviceStore = class {
    constructor(opts = {}) {
      this.dbName = opts.dbName ?? "herald-device";
      const idb = opts.indexedDB ?? globalThis.indexedDB;
      if (!idb) throw new Error("herald: no IndexedDB in this context");
      this.idb = idb;
    }
    open() {
      if (!this.db) {
        const r = this.idb.open(this.dbName, 1);
        r.onupgradeneeded = () => {
          r.result.createObjectStore(store);
        };
        this.db = req(r).catch((err) => {
          this.db = void 0;
          throw new Error(`herald: open device store ${this.dbName}: ${err}`);
        });
      }
      return this.db;
    }
    /** The device record, or undefined before the first registration. */
    async get() {
      const db = await this.open();
      return await req(db.transaction(store, "readonly").objectStore(store).get(key));
    }
    /** Replaces the device record. */
    async put(d) {
      const db = await this.open();
      const tx = db.transaction(store, "readwrite");
      tx.objectStore(store).put(d, key);
      await new Promise((resolve, reject) => {
        tx.oncomplete = () => resolve();
        tx.onerror = () => reject(tx.error);
        tx.onabort = () => reject(tx.error ?? new Error("herald: device store transaction aborted"));
      });
    }
    /** Closes the database (the next call opens it again). */
    async close() {
      const db = this.db;
      this.db = void 0;
      if (db) (await db).close();
    }
  };

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
    if (typeof o.occurrenceId === "string" && o.occurrenceId !== "") p.occurrenceId = o.occurrenceId;
    if (typeof o.body === "string") p.body = o.body;
    if (typeof o.url === "string") p.url = o.url;
    if (typeof o.type === "string" && o.type !== "") p.type = o.type;
    return p;
  }
  async function handlePush(text, deps) {
    const p = parsePayload(text);
    if (!p) return "invalid";
    if (!await deps.seen.claim(p.occurrenceId ?? p.id)) {
      await report(deps, p, "dropped");
      return "duplicate";
    }
    await deps.show(p.title, { tag: p.id, body: p.body, data: p });
    await report(deps, p, "displayed");
    return "shown";
  }
  async function report(deps, p, kind) {
    if (!deps.report) return;
    try {
      await deps.report(p, kind);
    } catch (err) {
      console.error("herald: receipt", kind, err);
    }
  }
  async function handleClick(data, deps) {
    const p = parsePayload(JSON.stringify(data ?? null));
    if (!p) return void 0;
    const work = [];
    if (p.url) work.push(deps.open(p.url));
    if (deps.report) work.push(deps.report(p, "opened"));
    for (const r of await Promise.allSettled(work)) {
      if (r.status === "rejected") console.error("herald: notificationclick", r.reason);
    }
    return p;
  }

  // src/receipts.ts
  var sleepReal = (ms) => new Promise((r) => setTimeout(r, ms));
  async function sendReceipt(deps, p, kind) {
    const dev = await deps.device.get();
    if (!dev || !dev.token) return "no-device";
    const body = { notificationId: p.id, kind, at: (deps.now ?? Date.now)() };
    if (p.occurrenceId) body.occurrenceId = p.occurrenceId;
    if (p.type) body.type = p.type;
    const init = {
      method: "POST",
      headers: { Authorization: `Bearer ${dev.token}`, "Content-Type": "application/json" },
      body: JSON.stringify(body)
    };
    const attempts = deps.attempts ?? 4;
    const sleep = deps.sleep ?? sleepReal;
    let wait = deps.backoffMs ?? 500;
    for (let i = 1; ; i++) {
      try {
        const res = await deps.fetch(`${dev.base}/v1/receipts`, init);
        if (res.ok) return "sent";
        if (res.status !== 429 && res.status < 500) return "refused";
      } catch {
      }
      if (i >= attempts) return "failed";
      await sleep(wait);
      wait *= 2;
    }
  }

  // src/seen.ts
  var store2 = "seen";
  var byAge = "at";
  var defaultMaxAgeMs = 7 * 24 * 60 * 60 * 1e3;
  var defaultMaxEntries = 1e3;
  function req2(r) {
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
          const s = r.result.createObjectStore(store2, { keyPath: "id" });
          s.createIndex(byAge, "at");
        };
        this.db = req2(r).catch((err) => {
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
      const tx = db.transaction(store2, "readwrite");
      const s = tx.objectStore(store2);
      const finished = done(tx);
      const prev = await req2(s.get(id));
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
      const tx = db.transaction(store2, "readonly");
      const e = await req2(tx.objectStore(store2).get(id));
      return e !== void 0 && e.at >= this.now() - this.maxAgeMs;
    }
    /** The number of entries kept. */
    async size() {
      const db = await this.open();
      return req2(db.transaction(store2, "readonly").objectStore(store2).count());
    }
    // prune forgets entries older than the age bound, then the oldest beyond
    // maxEntries, inside the claiming transaction.
    async prune(s, now) {
      const idx = s.index(byAge);
      const old = await req2(idx.getAllKeys(IDBKeyRange.upperBound(now - this.maxAgeMs, true)));
      for (const k of old) s.delete(k);
      const excess = await req2(s.count()) - this.maxEntries;
      if (excess <= 0) return;
      const oldest = await req2(idx.getAllKeys(null, excess));
      for (const k of oldest) s.delete(k);
    }
    /** Closes the database (a new claim opens it again). */
    async close() {
      const db = this.db;
      this.db = void 0;
      if (db) (await db).close();
    }
  };

  // src/subscription.ts
  function b64urlToBytes(s) {
    const pad = "=".repeat((4 - s.length % 4) % 4);
    const bin = atob((s + pad).replace(/-/g, "+").replace(/_/g, "/"));
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  async function vapidKey(fetchFn, base) {
    const res = await fetchFn(`${base}/v1/webpush/vapid-public-key`);
    if (!res.ok) throw new Error(`herald: VAPID public key: HTTP ${res.status}`);
    const { publicKey } = await res.json();
    return b64urlToBytes(publicKey);
  }
  function webPushOf(sub) {
    const { endpoint, keys } = sub;
    if (!endpoint || !keys?.p256dh || !keys?.auth) throw new Error("herald: the push subscription has no endpoint or keys");
    return { endpoint, p256dh: keys.p256dh, auth: keys.auth };
  }
  async function resubscribe(deps, fresh) {
    const dev = await deps.device.get();
    if (!dev || !dev.token) return "no-device";
    let sub = fresh ?? await deps.pushManager.getSubscription();
    if (!sub) {
      sub = await deps.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: await vapidKey(deps.fetch, dev.base) });
    }
    const res = await deps.fetch(`${dev.base}/v1/device/webpush`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${dev.token}`, "Content-Type": "application/json" },
      body: JSON.stringify(webPushOf(sub.toJSON()))
    });
    if (res.ok) return "updated";
    return res.status < 500 && res.status !== 429 ? "refused" : "failed";
  }

  // src/sw.ts
  var seen = new SeenSet();
  var device = new DeviceStore();
  async function tell(msg) {
    for (const c of await self.clients.matchAll({ type: "window", includeUncontrolled: true })) {
      c.postMessage(msg);
    }
  }
  async function receipt(p, kind) {
    const outcome = await sendReceipt({ device, fetch: (i, init) => fetch(i, init) }, p, kind);
    await tell({ herald: "receipt", id: p.id, kind, outcome });
  }
  async function onPush(text) {
    let outcome;
    try {
      outcome = await handlePush(text, {
        seen,
        show: (title, options) => self.registration.showNotification(title, options),
        report: receipt
      });
    } catch (err) {
      console.error("herald: push", err);
      outcome = "error";
    }
    await tell({ herald: "push", id: parsePayload(text)?.id, outcome });
  }
  async function onResubscribe(fresh) {
    let outcome;
    try {
      outcome = await resubscribe({ device, fetch: (i, init) => fetch(i, init), pushManager: self.registration.pushManager }, fresh);
    } catch (err) {
      console.error("herald: pushsubscriptionchange", err);
      outcome = "error";
    }
    await tell({ herald: "subscription", outcome });
  }
  self.addEventListener("push", (event) => {
    event.waitUntil(onPush(event.data?.text()));
  });
  self.addEventListener("notificationclick", (event) => {
    event.notification.close();
    event.waitUntil(handleClick(event.notification.data, { open: (url) => self.clients.openWindow(url), report: receipt }));
  });
  self.addEventListener("pushsubscriptionchange", (event) => {
    const e = event;
    e.waitUntil(onResubscribe(e.newSubscription));
  });
  self.addEventListener("message", (event) => {
    const d = event.data;
    if (d?.herald === "resubscribe") event.waitUntil(onResubscribe());
  });
})();
