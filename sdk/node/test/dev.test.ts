// Tests against a real herald (sdk/test starts `herald dev` and sets
// HERALD_SDK_TEST_URL); skipped without one.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, it } from "node:test";

import { Herald, HeraldError, verifyWebhook, type NotificationRecord, type SendRequest } from "../src/index.js";

const url = process.env.HERALD_SDK_TEST_URL;
const key = process.env.HERALD_SDK_TEST_KEY ?? "herald-dev-key";
const run = randomUUID().slice(0, 8);

/** Polls fn until it returns a value (not undefined); fails after a minute. */
async function eventually<T>(what: string, fn: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`still not ${what} after a minute`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** fn's answer, or undefined while herald answers 404 (its read model lags a send). */
async function found<T>(fn: () => Promise<T>): Promise<T | undefined> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof HeraldError && e.status === 404) return undefined;
    throw e;
  }
}

function outcomeOf(rec: NotificationRecord, channel: string): string | undefined {
  return rec.timeline.find((e) => e.kind === "outcome" && e.channel === channel)?.status;
}

describe("against herald dev", { skip: url ? false : "HERALD_SDK_TEST_URL is not set (sdk/test sets it)" }, () => {
  const herald = new Herald({ baseUrl: url ?? "http://unused", apiKey: key });
  const user = (name: string) => `node-${run}-${name}`;
  const note = (to: Partial<SendRequest>): SendRequest => ({ type: "sdk.test", title: "Hello", body: "from the Node SDK", ...to }) as SendRequest;

  it("registers a device, sends to its user and sees the push delivered in the timeline", async () => {
    const u = user("alice");
    const d = await herald.registerDevice(u, "phone", { platform: "ios", token: "a1b2c3d4", tags: ["beta"] });
    assert.equal(d.deviceId, "phone");
    assert.equal(d.enabled, true);
    const res = await herald.send(note({ recipients: [u] }), { waitSeconds: 10 });
    assert.equal(res.notifications.length, 1);
    assert.equal(res.notifications[0].status, "accepted");
    assert.ok(res.deliveries.some((x) => x.channel === "apns" && x.deviceId === "phone"), JSON.stringify(res));
    const id = res.notifications[0].id;
    const rec = await eventually("delivered", async () => {
      const r = await found(() => herald.getNotification(id));
      return r && outcomeOf(r, "apns") ? r : undefined;
    });
    assert.equal(outcomeOf(rec, "apns"), "delivered");
    assert.equal(rec.idempotencyKey, res.idempotencyKey);
    assert.equal(rec.recipient, u);
  });

  it("answers a retry with the same idempotency key as a replay of the first send", async () => {
    const u = user("bob");
    const first = await herald.send(note({ recipients: [u] }), { idempotencyKey: `order-${run}` });
    const again = await herald.send(note({ recipients: [u] }), { idempotencyKey: `order-${run}` });
    assert.equal(again.replayed, true);
    assert.equal(again.requestId, first.requestId);
    assert.deepEqual(again.notifications.map((n) => n.id), first.notifications.map((n) => n.id));
  });

  it("answers the same key with another body as a conflict, without retrying", async () => {
    const u = user("carol");
    await herald.send(note({ recipients: [u] }), { idempotencyKey: `conflict-${run}` });
    const err = await herald.send(note({ recipients: [u], body: "changed" }), { idempotencyKey: `conflict-${run}` }).catch((e) => e);
    assert.ok(err instanceof HeraldError, String(err));
    assert.equal(err.status, 422);
    assert.equal(err.attempts, 1);
    assert.ok(err.problem.originalRequestId);
  });

  it("sends one notification per recipient, each with its own id", async () => {
    const res = await herald.send(note({ recipients: [user("r1"), user("r2"), user("r3")] }));
    assert.equal(new Set(res.notifications.map((n) => n.id)).size, 3);
    assert.deepEqual(res.notifications.map((n) => n.recipient), [user("r1"), user("r2"), user("r3")]);
  });

  it("sends to every target kind", async () => {
    const u = user("dora");
    await herald.registerDevice(u, "tablet", { platform: "android", token: "fcm-token-1", tags: [`tag-${run}`] });
    await herald.setSegment(`seg-${run}`, [u, user("erin")]);
    // A tag, segment or all target is one notification addressed to the
    // group; the route stage fans it out to the members.
    const cases: [string, SendRequest["target"], string[]][] = [
      ["user", { kind: "user", userId: u }, [u]],
      ["device", { kind: "device", deviceId: "tablet", userId: u }, [u]],
      ["tag", { kind: "tag", tag: `tag-${run}` }, [`@tag:tag-${run}`]],
      ["segment", { kind: "segment", segment: `seg-${run}` }, [`@segment:seg-${run}`]],
      ["all", { kind: "all" }, ["@all"]],
    ];
    for (const [kind, target, want] of cases) {
      const res = await herald.send(note({ target }));
      assert.deepEqual(res.notifications.map((n) => n.recipient).sort(), want.sort(), kind);
    }
    assert.deepEqual((await herald.getSegment(`seg-${run}`)).members.sort(), [u, user("erin")].sort());
    await herald.deleteSegment(`seg-${run}`);
  });

  it("explains that a send with a used dedupe key would be deduplicated", async () => {
    const body = note({ recipients: [user("fay")], dedupeKey: `dk-${run}`, dedupeWindowMs: 3_600_000 });
    const sent = await herald.send(body, { waitSeconds: 10 });
    const ex = await eventually("deduplicated", async () => {
      const e = await herald.explain(body);
      return e.wouldDeduplicate ? e : undefined;
    });
    assert.equal(ex.notifications[0].id, sent.notifications[0].id);
    assert.equal(ex.notifications[0].idSource, "dedupe_key");
    assert.equal(ex.consistency, "read-your-writes");
  });

  it("lists, reads and deletes devices, and answers 404 for a deleted one", async () => {
    const u = user("gus");
    await herald.registerDevice(u, "a", { platform: "ios", token: "t-a" });
    await herald.registerDevice(u, "b", { platform: "android", token: "t-b" });
    assert.deepEqual((await herald.listDevices(u)).map((d) => d.deviceId).sort(), ["a", "b"]);
    assert.equal((await herald.getDevice(u, "b")).platform, "android");
    await herald.deleteDevice(u, "a");
    const err = await herald.getDevice(u, "a").catch((e) => e);
    assert.ok(err instanceof HeraldError && err.status === 404, String(err));
  });

  it("sets, reads and deletes preferences", async () => {
    const u = user("hal");
    const p = await herald.setPreferences(u, { channels: { apns: false }, optedOutTypes: ["marketing"], quietHours: { start: "22:00", end: "07:00", timeZone: "Europe/Paris" } });
    assert.equal(p.channels.apns, false);
    const got = await herald.getPreferences(u);
    assert.deepEqual(got.optedOutTypes, ["marketing"]);
    assert.equal(got.quietHours?.timeZone, "Europe/Paris");
    await herald.deletePreferences(u);
    const err = await herald.getPreferences(u).catch((e) => e);
    assert.ok(err instanceof HeraldError && err.status === 404, String(err));
  });

  it("reads the feed, marks an item read and then all", async () => {
    const u = user("ivy");
    const a = await herald.send(note({ recipients: [u], title: "one" }), { waitSeconds: 10 });
    await herald.send(note({ recipients: [u], title: "two" }), { waitSeconds: 10 });
    const page = await eventually("in the feed", async () => {
      const p = await herald.getFeed(u);
      return p.items.length === 2 ? p : undefined;
    });
    assert.equal(page.unreadCount, 2);
    await herald.markFeedRead(u, a.notifications[0].id);
    const after = await herald.getFeed(u);
    assert.equal(after.items.find((i) => i.notificationId === a.notifications[0].id)?.read, true);
    assert.equal(await herald.markAllFeedRead(u), 1);
    const items = [];
    for await (const item of herald.feedItems(u, { limit: 1 })) items.push(item);
    assert.equal(items.length, 2);
    assert.ok(items.every((i) => i.read));
  });

  it("registers a webhook endpoint and verifies the signed event herald posts to it", async () => {
    const got: { headers: IncomingHttpHeaders; body: Buffer }[] = [];
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        got.push({ headers: req.headers, body: Buffer.concat(chunks) });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const port = (server.address() as AddressInfo).port;
      const id = `hook-${run}`;
      const hook = await herald.setWebhook(id, { url: `http://127.0.0.1:${port}/hooks`, events: ["delivery.completed"] });
      assert.ok(hook.secret?.startsWith("whsec_"), "the creating PUT answers the secret");
      assert.ok((await herald.listWebhooks()).some((w) => w.id === id));
      assert.equal((await herald.getWebhook(id)).secret, undefined);
      const u = user("jan");
      await herald.registerDevice(u, "phone", { platform: "ios", token: "jan-token" });
      const sent = await herald.send(note({ recipients: [u] }), { waitSeconds: 10 });
      const event = await eventually("posted", async () =>
        got.find((g) => g.body.toString().includes(sent.notifications[0].id)),
      );
      const webhookId = verifyWebhook(hook.secret!, event.headers, event.body);
      assert.equal(webhookId, event.headers["webhook-id"]);
      assert.throws(() => verifyWebhook(hook.secret!, event.headers, Buffer.concat([event.body, Buffer.from(" ")])));
      await herald.deleteWebhook(id);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it("answers a request that breaks a rule with the offending field, at once", async () => {
    const err = await herald.send({ type: "sdk.test", recipients: [user("kim")], title: "x" } as SendRequest).catch((e) => e);
    assert.ok(err instanceof HeraldError, String(err));
    assert.equal(err.status, 422);
    assert.equal(err.attempts, 1);
    assert.ok("body" in err.fieldErrors, JSON.stringify(err.problem));
  });
});
