// herald's service worker (served as /sdk/herald-sw.js): shows each herald
// notification at most once per browser, and opens its url on click.
// Register it from a page with the helper in /sdk/herald.js, or import it
// into your own service worker with importScripts("/sdk/herald-sw.js").

import { handlePush } from "./push.js";
import { SeenSet } from "./seen.js";

declare const self: ServiceWorkerGlobalScope;

const seen = new SeenSet();

self.addEventListener("push", (event: PushEvent) => {
  event.waitUntil(
    handlePush(event.data?.text(), {
      seen,
      show: (title, options) => self.registration.showNotification(title, options),
    }).catch((err) => console.error("herald: push", err)),
  );
});

self.addEventListener("notificationclick", (event: NotificationEvent) => {
  event.notification.close();
  const url = (event.notification.data as { url?: string } | null)?.url;
  if (url) event.waitUntil(self.clients.openWindow(url).then(() => undefined));
});
