// herald's service worker (served as /sdk/herald-sw.js): shows each herald
// notification at most once per browser, opens its url on click, reports
// receipts (displayed, opened, dropped) to herald with the device's receipt
// token, and tells herald a replaced push subscription.
// Register it from a page with the helper in /sdk/herald.js, or import it
// into your own service worker with importScripts("/sdk/herald-sw.js").

import { DeviceStore } from "./device.js";
import { handleClick, handlePush, parsePayload, type Payload } from "./push.js";
import { sendReceipt, type ReceiptKind } from "./receipts.js";
import { SeenSet } from "./seen.js";
import { resubscribe } from "./subscription.js";

declare const self: ServiceWorkerGlobalScope;

const seen = new SeenSet();
const device = new DeviceStore();

// Tells the origin's windows what happened, for a page's timeline (and the
// browser tests): {herald: "push", id, outcome}, {herald: "receipt", id,
// kind, outcome}, {herald: "subscription", outcome}.
async function tell(msg: Record<string, unknown>): Promise<void> {
  for (const c of await self.clients.matchAll({ type: "window", includeUncontrolled: true })) {
    c.postMessage(msg);
  }
}

async function receipt(p: Payload, kind: ReceiptKind): Promise<void> {
  const outcome = await sendReceipt({ device, fetch: (i, init) => fetch(i, init) }, p, kind);
  await tell({ herald: "receipt", id: p.id, kind, outcome });
}

async function onPush(text: string | undefined): Promise<void> {
  let outcome: string;
  try {
    outcome = await handlePush(text, {
      seen,
      show: (title, options) => self.registration.showNotification(title, options),
      report: receipt,
    });
  } catch (err) {
    console.error("herald: push", err);
    outcome = "error";
  }
  await tell({ herald: "push", id: parsePayload(text)?.id, outcome });
}

async function onResubscribe(fresh?: PushSubscription | null): Promise<void> {
  let outcome: string;
  try {
    outcome = await resubscribe({ device, fetch: (i, init) => fetch(i, init), pushManager: self.registration.pushManager }, fresh);
  } catch (err) {
    console.error("herald: pushsubscriptionchange", err);
    outcome = "error";
  }
  await tell({ herald: "subscription", outcome });
}

self.addEventListener("push", (event: PushEvent) => {
  event.waitUntil(onPush(event.data?.text()));
});

self.addEventListener("notificationclick", (event: NotificationEvent) => {
  event.notification.close();
  event.waitUntil(handleClick(event.notification.data, { open: (url) => self.clients.openWindow(url), report: receipt }));
});

// The browser replaced the subscription (it expired, or the push service
// rotated it): tell herald the new one. newSubscription is often null
// (Chromium): then the worker subscribes again itself.
interface SubscriptionChangeEvent extends ExtendableEvent {
  readonly newSubscription?: PushSubscription | null;
}
self.addEventListener("pushsubscriptionchange", (event: Event) => {
  const e = event as SubscriptionChangeEvent;
  e.waitUntil(onResubscribe(e.newSubscription));
});

// A page may ask the worker to check the subscription with herald again
// ({herald: "resubscribe"}), e.g. after it found the subscription changed
// while no worker ran.
self.addEventListener("message", (event: ExtendableMessageEvent) => {
  const d = event.data as { herald?: string } | null;
  if (d?.herald === "resubscribe") event.waitUntil(onResubscribe());
});
