// herald's service worker (served as /sdk/herald-sw.js): shows each herald
// notification at most once per browser, and opens its url on click.
// Register it from a page with the helper in /sdk/herald.js, or import it
// into your own service worker with importScripts("/sdk/herald-sw.js").

import { handlePush, parsePayload } from "./push.js";
import { SeenSet } from "./seen.js";

declare const self: ServiceWorkerGlobalScope;

const seen = new SeenSet();

// Each push's outcome is posted to the origin's windows as
// {herald: "push", id, outcome}, for a page's timeline (and the browser test).
async function onPush(text: string | undefined): Promise<void> {
  let outcome: string;
  try {
    outcome = await handlePush(text, {
      seen,
      show: (title, options) => self.registration.showNotification(title, options),
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

self.addEventListener("push", (event: PushEvent) => {
  event.waitUntil(onPush(event.data?.text()));
});

self.addEventListener("notificationclick", (event: NotificationEvent) => {
  event.notification.close();
  const url = (event.notification.data as { url?: string } | null)?.url;
  if (url) event.waitUntil(self.clients.openWindow(url).then(() => undefined));
});
