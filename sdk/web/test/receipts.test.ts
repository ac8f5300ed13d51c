import { test } from "node:test";
import assert from "node:assert/strict";
import { IDBFactory } from "fake-indexeddb";
import "fake-indexeddb/auto";
import { DeviceStore, type DeviceRecord } from "../src/device.js";
import { handleClick, handlePush, type Payload } from "../src/push.js";
import { sendReceipt } from "../src/receipts.js";
import { SeenSet } from "../src/seen.js";
import { resubscribe } from "../src/subscription.js";
import { registerWith } from "../src/page.js";

const dev: DeviceRecord = { base: "https://herald.test", token: "hrt1.tok", userId: "u1", deviceId: "d1" };
const payload: Payload = { id: "0123456789abcdef0123456789abcdef", title: "T", type: "invoice.paid" };

interface Call {
  url: string;
  method: string;
  auth: string | null;
  body: unknown;
}

// A fetch that answers each call with the next status (the last repeats),
// or throws for status 0 (a network error), and records the calls.
function fakeFetch(...statuses: number[]) {
  const calls: Call[] = [];
  const fn = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const h = new Headers(init?.headers);
    calls.push({ url: String(input), method: init?.method ?? "GET", auth: h.get("Authorization"), body: init?.body ? JSON.parse(String(init.body)) : undefined });
    const status = statuses[Math.min(calls.length - 1, statuses.length - 1)];
    if (status === 0) throw new TypeError("network error");
    return new Response(status === 204 ? null : JSON.stringify({ publicKey: "AQID" }), { status });
  }) as typeof fetch;
  return { fn, calls };
}

const noSleep = async () => {};

test("sendReceipt", async (t) => {
  const cases: { name: string; statuses: number[]; outcome: string; calls: number }[] = [
    { name: "a receipt herald accepts is sent once", statuses: [202], outcome: "sent", calls: 1 },
    { name: "a 503 then a 202 is retried with the same body", statuses: [503, 202], outcome: "sent", calls: 2 },
    { name: "a network error is retried", statuses: [0, 0, 202], outcome: "sent", calls: 3 },
    { name: "a 429 is retried", statuses: [429, 202], outcome: "sent", calls: 2 },
    { name: "a 401 (a token superseded by a newer registration) is not retried", statuses: [401], outcome: "refused", calls: 1 },
    { name: "retries stop after the attempts", statuses: [500], outcome: "failed", calls: 4 },
  ];
  for (const c of cases) {
    await t.test(c.name, async () => {
      const f = fakeFetch(...c.statuses);
      const slept: number[] = [];
      const out = await sendReceipt(
        { device: { get: async () => dev }, fetch: f.fn, sleep: async (ms) => void slept.push(ms), now: () => 42 },
        payload,
        "displayed",
      );
      assert.equal(out, c.outcome);
      assert.equal(f.calls.length, c.calls);
      for (const call of f.calls) {
        assert.equal(call.url, "https://herald.test/v1/receipts");
        assert.equal(call.method, "POST");
        assert.equal(call.auth, "Bearer hrt1.tok");
        assert.deepEqual(call.body, { notificationId: payload.id, kind: "displayed", type: "invoice.paid", at: 42 });
      }
      assert.deepEqual(slept, [500, 1000, 2000].slice(0, c.calls - 1), "backoff doubles");
    });
  }
  await t.test("a push of a named occurrence reports it, so herald names that push's delivery", async () => {
    const f = fakeFetch(202);
    await sendReceipt({ device: { get: async () => dev }, fetch: f.fn, now: () => 42 }, { ...payload, occurrenceId: "o-1" }, "opened");
    assert.deepEqual(f.calls[0].body, { notificationId: payload.id, occurrenceId: "o-1", kind: "opened", type: "invoice.paid", at: 42 });
  });
  await t.test("without a registered device nothing is sent", async () => {
    const f = fakeFetch(202);
    assert.equal(await sendReceipt({ device: { get: async () => undefined }, fetch: f.fn, sleep: noSleep }, payload, "opened"), "no-device");
    assert.equal(f.calls.length, 0);
  });
});

test("handlePush reports displayed for a shown push and dropped for a repeat, never for an invalid one", async () => {
  const seen = new SeenSet({ indexedDB: new IDBFactory() });
  const reports: string[] = [];
  const deps = {
    seen,
    show: async () => {},
    report: async (p: Payload, kind: string) => void reports.push(`${p.id}:${kind}:${p.type}`),
  };
  const text = JSON.stringify(payload);
  assert.deepEqual([await handlePush(text, deps), await handlePush(text, deps), await handlePush("nope", deps)], ["shown", "duplicate", "invalid"]);
  assert.deepEqual(reports, [`${payload.id}:displayed:invoice.paid`, `${payload.id}:dropped:invoice.paid`]);
});

test("a failing receipt never changes what a push shows", async () => {
  const seen = new SeenSet({ indexedDB: new IDBFactory() });
  let shown = 0;
  const deps = { seen, show: async () => void shown++, report: async () => Promise.reject(new Error("offline")) };
  assert.equal(await handlePush(JSON.stringify(payload), deps), "shown");
  assert.equal(shown, 1);
});

test("the device store keeps the record across instances (the page writes, the worker reads)", async () => {
  const idb = new IDBFactory();
  const page = new DeviceStore({ indexedDB: idb });
  assert.equal(await page.get(), undefined);
  await page.put(dev);
  await page.close();
  assert.deepEqual(await new DeviceStore({ indexedDB: idb }).get(), dev);
});

test("registerWith", async (t) => {
  const sub: PushSubscriptionJSON = { endpoint: "https://push.test/s/1", keys: { p256dh: "BNc", auth: "tBH" } };
  await t.test("registers with the API key, keeps the token, and reuses the device id on the next registration", async () => {
    const store = new DeviceStore({ indexedDB: new IDBFactory() });
    const calls: Call[] = [];
    let n = 0;
    const fetchFn = (async (input: RequestInfo | URL, init?: RequestInit) => {
      calls.push({ url: String(input), method: init?.method ?? "GET", auth: new Headers(init?.headers).get("Authorization"), body: JSON.parse(String(init?.body)) });
      return new Response(JSON.stringify({ receiptToken: `hrt1.t${++n}` }), { status: 201 });
    }) as typeof fetch;
    const opts = { userId: "u 1", apiKey: "herald-dev-key", base: "https://herald.test", store, fetch: fetchFn };
    const first = await registerWith(sub, opts);
    assert.match(first.deviceId, /^web-[0-9a-f]{16}$/);
    assert.deepEqual(await store.get(), { base: "https://herald.test", token: "hrt1.t1", userId: "u 1", deviceId: first.deviceId });
    const second = await registerWith(sub, opts);
    assert.equal(second.deviceId, first.deviceId);
    assert.equal((await store.get())?.token, "hrt1.t2", "a registration again replaces the token");
    assert.equal(calls[0].url, `https://herald.test/v1/users/u%201/devices/${first.deviceId}`);
    assert.equal(calls[0].method, "PUT");
    assert.equal(calls[0].auth, "Bearer herald-dev-key");
    assert.deepEqual(calls[0].body, { platform: "web", webPush: { endpoint: "https://push.test/s/1", p256dh: "BNc", auth: "tBH" } });
  });
  await t.test("a backend's registerDevice is used instead of the API", async () => {
    const store = new DeviceStore({ indexedDB: new IDBFactory() });
    const f = fakeFetch(500);
    let got: unknown;
    await registerWith(sub, {
      userId: "u2", deviceId: "laptop", base: "https://h.test", store, fetch: f.fn,
      registerDevice: async (d) => ((got = d), { receiptToken: "hrt1.b" }),
    });
    assert.equal(f.calls.length, 0);
    assert.deepEqual(got, { userId: "u2", deviceId: "laptop", platform: "web", webPush: { endpoint: "https://push.test/s/1", p256dh: "BNc", auth: "tBH" } });
    assert.equal((await store.get())?.token, "hrt1.b");
  });
  await t.test("an answer without a receipt token fails and keeps nothing", async () => {
    const store = new DeviceStore({ indexedDB: new IDBFactory() });
    await assert.rejects(registerWith(sub, { userId: "u3", base: "https://h.test", store, fetch: fakeFetch(500).fn, registerDevice: async () => ({}) }));
    assert.equal(await store.get(), undefined);
  });
});

test("resubscribe", async (t) => {
  const fresh = { toJSON: () => ({ endpoint: "https://push.test/s/2", keys: { p256dh: "BNd", auth: "tBI" } }) } as unknown as PushSubscription;
  const manager = (current: PushSubscription | null) => {
    const subscribed: unknown[] = [];
    return {
      subscribed,
      pm: {
        getSubscription: async () => current,
        subscribe: async (o?: PushSubscriptionOptionsInit) => (subscribed.push(o), fresh),
      } as Pick<PushManager, "getSubscription" | "subscribe">,
    };
  };
  await t.test("the event's new subscription is sent to herald with the device token", async () => {
    const f = fakeFetch(200);
    const m = manager(null);
    assert.equal(await resubscribe({ device: { get: async () => dev }, fetch: f.fn, pushManager: m.pm }, fresh), "updated");
    assert.equal(m.subscribed.length, 0);
    assert.deepEqual(f.calls.map((c) => [c.method, c.url, c.auth, c.body]), [
      ["PUT", "https://herald.test/v1/device/webpush", "Bearer hrt1.tok", { endpoint: "https://push.test/s/2", p256dh: "BNd", auth: "tBI" }],
    ]);
  });
  await t.test("without one the worker subscribes again with herald's VAPID key", async () => {
    const f = fakeFetch(200, 200);
    const m = manager(null);
    assert.equal(await resubscribe({ device: { get: async () => dev }, fetch: f.fn, pushManager: m.pm }, null), "updated");
    assert.equal(f.calls[0].url, "https://herald.test/v1/webpush/vapid-public-key");
    const opts = m.subscribed[0] as { userVisibleOnly: boolean; applicationServerKey: Uint8Array };
    assert.equal(opts.userVisibleOnly, true);
    assert.deepEqual(Array.from(opts.applicationServerKey), [1, 2, 3]);
    assert.equal(f.calls[1].url, "https://herald.test/v1/device/webpush");
  });
  await t.test("a superseded token is refused, and an unregistered browser sends nothing", async () => {
    assert.equal(await resubscribe({ device: { get: async () => dev }, fetch: fakeFetch(401).fn, pushManager: manager(fresh).pm }), "refused");
    const f = fakeFetch(200);
    assert.equal(await resubscribe({ device: { get: async () => undefined }, fetch: f.fn, pushManager: manager(fresh).pm }), "no-device");
    assert.equal(f.calls.length, 0);
  });
});

test("handleClick opens the notification's url and reports opened; other data is left alone", async () => {
  const opened: string[] = [];
  const reports: string[] = [];
  const deps = { open: async (u: string) => void opened.push(u), report: async (p: Payload, k: string) => void reports.push(`${p.id}:${k}`) };
  await handleClick({ ...payload, url: "https://app.test/inv/1" }, deps);
  await handleClick({ id: "0123456789abcdef0123456789abcdee", title: "no url" }, deps);
  await handleClick({ someone: "else" }, deps);
  await handleClick(null, deps);
  assert.deepEqual(opened, ["https://app.test/inv/1"]);
  assert.deepEqual(reports, [`${payload.id}:opened`, "0123456789abcdef0123456789abcdee:opened"]);
  const failing = { open: async () => Promise.reject(new Error("blocked")), report: async (p: Payload, k: string) => void reports.push(`${p.id}:${k}`) };
  await handleClick({ ...payload, url: "https://app.test/x" }, failing);
  assert.equal(reports.length, 3, "a window that fails to open still reports opened");
});
