// The page-side helper (served as /sdk/herald.js, an ES module): registers
// herald's service worker, subscribes this browser to Web Push with
// herald's VAPID public key, and registers the browser as a device with
// herald, keeping the device's receipt token where the service worker reads
// it (IndexedDB) to send receipts and to re-register after
// pushsubscriptionchange.

import { DeviceStore, type DeviceRecord } from "./device.js";
import { vapidKey, webPushOf } from "./subscription.js";

export { DeviceStore, type DeviceRecord };

export interface SubscribeOptions {
  /** herald's base URL (default: this page's origin). */
  base?: string;
  /**
   * The service worker's URL (default "/sdk/herald-sw.js" on this page's
   * origin, where herald serves it when the page is served by herald). A
   * service worker must come from the page's own origin: elsewhere, serve
   * herald's file from your site, or importScripts it into your worker.
   */
  serviceWorker?: string;
  /** The worker's scope (default "/": herald serves it with Service-Worker-Allowed: /). */
  scope?: string;
}

async function registerWorker(opts: SubscribeOptions): Promise<ServiceWorkerRegistration> {
  await navigator.serviceWorker.register(opts.serviceWorker ?? "/sdk/herald-sw.js", { scope: opts.scope ?? "/" });
  return navigator.serviceWorker.ready;
}

/** The device registration herald's PUT /v1/users/{userId}/devices/{deviceId} takes. */
export interface WebDevice {
  userId: string;
  deviceId: string;
  platform: "web";
  webPush: { endpoint: string; p256dh: string; auth: string };
}

export interface RegisterOptions extends SubscribeOptions {
  userId: string;
  /** This browser's device id (default: the one registered before, else a random one). */
  deviceId?: string;
  /**
   * Registers the device with herald and returns herald's answer (which
   * holds receiptToken). Registration needs an API key, which belongs on a
   * server: in production, have your backend call herald's PUT
   * /v1/users/{userId}/devices/{deviceId} and return its answer. Without
   * registerDevice the helper calls herald itself with apiKey: only where
   * the key is public anyway (herald dev's demo key).
   */
  registerDevice?: (d: WebDevice) => Promise<{ receiptToken?: string }>;
  apiKey?: string;
  /** Use this subscription instead of subscribing (one obtained elsewhere, or a test's). */
  subscription?: PushSubscriptionJSON;
  /** Where the device record is kept (default: a DeviceStore on IndexedDB "herald-device"). */
  store?: Pick<DeviceStore, "get" | "put">;
  fetch?: typeof fetch;
}

export interface Registration {
  userId: string;
  deviceId: string;
  subscription: PushSubscriptionJSON;
}

/**
 * subscribe registers herald's service worker and returns this browser's
 * push subscription (an existing one is reused), as the webPush field of a
 * device registration wants it.
 */
export async function subscribe(opts: SubscribeOptions = {}): Promise<PushSubscriptionJSON> {
  const base = opts.base ?? location.origin;
  const reg = await registerWorker(opts);
  let sub = await reg.pushManager.getSubscription();
  if (!sub) {
    sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: await vapidKey(fetch, base) });
  }
  return sub.toJSON();
}

function randomID(): string {
  const b = new Uint8Array(8);
  crypto.getRandomValues(b);
  return "web-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/**
 * registerWith registers a device with herald for a subscription and keeps
 * herald's base URL, the ids and the receipt token in the store, for the
 * service worker. Each registration issues a new receipt token (the old one
 * stops working), so the store always holds the current one.
 */
export async function registerWith(
  sub: PushSubscriptionJSON,
  opts: RegisterOptions & { base: string; store: Pick<DeviceStore, "get" | "put">; fetch: typeof fetch },
): Promise<Registration> {
  const prev = await opts.store.get();
  const deviceId = opts.deviceId ?? (prev?.userId === opts.userId ? prev?.deviceId : undefined) ?? randomID();
  const d: WebDevice = { userId: opts.userId, deviceId, platform: "web", webPush: webPushOf(sub) };
  let answer: { receiptToken?: string };
  if (opts.registerDevice) {
    answer = await opts.registerDevice(d);
  } else {
    if (!opts.apiKey) throw new Error("herald: register needs registerDevice (your backend) or an apiKey");
    const res = await opts.fetch(`${opts.base}/v1/users/${encodeURIComponent(d.userId)}/devices/${encodeURIComponent(deviceId)}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${opts.apiKey}`, "Content-Type": "application/json" },
      body: JSON.stringify({ platform: "web", webPush: d.webPush }),
    });
    if (!res.ok) throw new Error(`herald: register device: HTTP ${res.status}`);
    answer = (await res.json()) as { receiptToken?: string };
  }
  if (!answer.receiptToken) throw new Error("herald: the registration answered no receiptToken");
  await opts.store.put({ base: opts.base, token: answer.receiptToken, userId: d.userId, deviceId });
  return { userId: d.userId, deviceId, subscription: sub };
}

/**
 * register does it all: registers herald's service worker, subscribes
 * (or takes opts.subscription), registers the device with herald and keeps
 * its receipt token for the service worker.
 */
export async function register(opts: RegisterOptions): Promise<Registration> {
  const base = opts.base ?? location.origin;
  const sub = opts.subscription ?? (await subscribe(opts));
  if (opts.subscription) await registerWorker(opts);
  return registerWith(sub, { ...opts, base, store: opts.store ?? new DeviceStore(), fetch: opts.fetch ?? ((i, init) => fetch(i, init)) });
}
