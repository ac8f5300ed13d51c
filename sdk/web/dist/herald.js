// src/page.ts
function b64urlToBytes(s) {
  const pad = "=".repeat((4 - s.length % 4) % 4);
  const bin = atob((s + pad).replace(/-/g, "+").replace(/_/g, "/"));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
async function subscribe(opts = {}) {
  const base = opts.base ?? location.origin;
  const reg = await navigator.serviceWorker.register(opts.serviceWorker ?? `${base}/sdk/herald-sw.js`);
  await navigator.serviceWorker.ready;
  let sub = await reg.pushManager.getSubscription();
  if (!sub) {
    const res = await fetch(`${base}/v1/webpush/vapid-public-key`);
    if (!res.ok) throw new Error(`herald: VAPID public key: HTTP ${res.status}`);
    const { publicKey } = await res.json();
    sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: b64urlToBytes(publicKey) });
  }
  return sub.toJSON();
}
export {
  subscribe
};
