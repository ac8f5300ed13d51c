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

// src/page.ts
async function registerWorker(opts) {
  await navigator.serviceWorker.register(opts.serviceWorker ?? "/sdk/herald-sw.js", { scope: opts.scope ?? "/" });
  return navigator.serviceWorker.ready;
}
async function subscribe(opts = {}) {
  const base = opts.base ?? location.origin;
  const reg = await registerWorker(opts);
  let sub = await reg.pushManager.getSubscription();
  if (!sub) {
    sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: await vapidKey(fetch, base) });
  }
  return sub.toJSON();
}
function randomID() {
  const b = new Uint8Array(8);
  crypto.getRandomValues(b);
  return "web-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}
async function registerWith(sub, opts) {
  const prev = await opts.store.get();
  const deviceId = opts.deviceId ?? (prev?.userId === opts.userId ? prev?.deviceId : void 0) ?? randomID();
  const d = { userId: opts.userId, deviceId, platform: "web", webPush: webPushOf(sub) };
  let answer;
  if (opts.registerDevice) {
    answer = await opts.registerDevice(d);
  } else {
    if (!opts.apiKey) throw new Error("herald: register needs registerDevice (your backend) or an apiKey");
    const res = await opts.fetch(`${opts.base}/v1/users/${encodeURIComponent(d.userId)}/devices/${encodeURIComponent(deviceId)}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${opts.apiKey}`, "Content-Type": "application/json" },
      body: JSON.stringify({ platform: "web", webPush: d.webPush })
    });
    if (!res.ok) throw new Error(`herald: register device: HTTP ${res.status}`);
    answer = await res.json();
  }
  if (!answer.receiptToken) throw new Error("herald: the registration answered no receiptToken");
  await opts.store.put({ base: opts.base, token: answer.receiptToken, userId: d.userId, deviceId });
  return { userId: d.userId, deviceId, subscription: sub };
}
async function register(opts) {
  const base = opts.base ?? location.origin;
  const sub = opts.subscription ?? await subscribe(opts);
  if (opts.subscription) await registerWorker(opts);
  return registerWith(sub, { ...opts, base, store: opts.store ?? new DeviceStore(), fetch: opts.fetch ?? ((i, init) => fetch(i, init)) });
}
export {
  DeviceStore,
  register,
  registerWith,
  subscribe
};
