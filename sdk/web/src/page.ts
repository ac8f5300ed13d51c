// The page-side helper (served as /sdk/herald.js, an ES module): registers
// herald's service worker and subscribes this browser to Web Push with
// herald's VAPID public key.

export interface SubscribeOptions {
  /** herald's base URL (default: this page's origin). */
  base?: string;
  /** The service worker's URL (default base + "/sdk/herald-sw.js"). */
  serviceWorker?: string;
}

function b64urlToBytes(s: string): Uint8Array<ArrayBuffer> {
  const pad = "=".repeat((4 - (s.length % 4)) % 4);
  const bin = atob((s + pad).replace(/-/g, "+").replace(/_/g, "/"));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * subscribe registers herald's service worker and returns this browser's
 * push subscription (an existing one is reused), as the webPush field of a
 * device registration wants it.
 */
export async function subscribe(opts: SubscribeOptions = {}): Promise<PushSubscriptionJSON> {
  const base = opts.base ?? location.origin;
  const reg = await navigator.serviceWorker.register(opts.serviceWorker ?? `${base}/sdk/herald-sw.js`);
  await navigator.serviceWorker.ready;
  let sub = await reg.pushManager.getSubscription();
  if (!sub) {
    const res = await fetch(`${base}/v1/webpush/vapid-public-key`);
    if (!res.ok) throw new Error(`herald: VAPID public key: HTTP ${res.status}`);
    const { publicKey } = (await res.json()) as { publicKey: string };
    sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: b64urlToBytes(publicKey) });
  }
  return sub.toJSON();
}
