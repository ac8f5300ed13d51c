// Re-registration after the browser replaced the push subscription
// (pushsubscriptionchange): the service worker subscribes again if it has
// to, with herald's VAPID key, and tells herald the new subscription with
// the device's receipt token (PUT /v1/device/webpush): no API key, no page.

import type { DeviceRecord } from "./device.js";

export function b64urlToBytes(s: string): Uint8Array<ArrayBuffer> {
  const pad = "=".repeat((4 - (s.length % 4)) % 4);
  const bin = atob((s + pad).replace(/-/g, "+").replace(/_/g, "/"));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** herald's VAPID public key, as PushManager.subscribe wants it. */
export async function vapidKey(fetchFn: typeof fetch, base: string): Promise<Uint8Array<ArrayBuffer>> {
  const res = await fetchFn(`${base}/v1/webpush/vapid-public-key`);
  if (!res.ok) throw new Error(`herald: VAPID public key: HTTP ${res.status}`);
  const { publicKey } = (await res.json()) as { publicKey: string };
  return b64urlToBytes(publicKey);
}

/** The webPush member of a device registration, from a subscription. */
export function webPushOf(sub: PushSubscriptionJSON): { endpoint: string; p256dh: string; auth: string } {
  const { endpoint, keys } = sub;
  if (!endpoint || !keys?.p256dh || !keys?.auth) throw new Error("herald: the push subscription has no endpoint or keys");
  return { endpoint, p256dh: keys.p256dh, auth: keys.auth };
}

export interface ResubscribeDeps {
  device: { get(): Promise<DeviceRecord | undefined> };
  fetch: typeof fetch;
  pushManager: Pick<PushManager, "getSubscription" | "subscribe">;
}

export type ResubscribeOutcome = "updated" | "no-device" | "refused" | "failed";

/**
 * resubscribe tells herald this browser's current subscription: the one
 * the event carries, else the registration's, else a new one.
 */
export async function resubscribe(deps: ResubscribeDeps, fresh?: PushSubscription | null): Promise<ResubscribeOutcome> {
  const dev = await deps.device.get();
  if (!dev || !dev.token) return "no-device";
  let sub = fresh ?? (await deps.pushManager.getSubscription());
  if (!sub) {
    sub = await deps.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: await vapidKey(deps.fetch, dev.base) });
  }
  const res = await deps.fetch(`${dev.base}/v1/device/webpush`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${dev.token}`, "Content-Type": "application/json" },
    body: JSON.stringify(webPushOf(sub.toJSON())),
  });
  if (res.ok) return "updated";
  return res.status < 500 && res.status !== 429 ? "refused" : "failed";
}
