// Unit tests of the retry, idempotency and signature logic, against a local
// HTTP server (no herald needed).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";

import {
  Herald,
  HeraldConnectionError,
  HeraldError,
  USER_AGENT,
  WebhookVerificationError,
  backoffCeiling,
  backoffDelay,
  idempotencyKeyFor,
  parseRetryAfter,
  signWebhook,
  verifyWebhook,
} from "../src/index.js";

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: string;
}

/** A local server answering each request with the next scripted answer. */
class Script {
  server!: Server;
  seen: Seen[] = [];
  answers: ((res: ServerResponse) => void)[] = [];
  url = "";

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        this.seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
        const next = this.answers.shift() ?? json(200, {});
        next(res);
      });
    });
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  reset(...answers: ((res: ServerResponse) => void)[]): void {
    this.seen = [];
    this.answers = answers;
  }
}

function json(status: number, body: unknown, headers: Record<string, string> = {}) {
  return (res: ServerResponse) => {
    const type = status >= 400 ? "application/problem+json" : "application/json";
    res.writeHead(status, { "Content-Type": type, ...headers });
    res.end(JSON.stringify(body));
  };
}

function problem(status: number, headers: Record<string, string> = {}) {
  return json(status, { type: `https://herald.dev/problems/${status}`, title: `status ${status}`, status }, headers);
}

/** Drops the connection without an answer. */
const hangUp = (res: ServerResponse) => res.socket?.destroy();

/** Answers after ms. */
const delayed = (ms: number, then: (res: ServerResponse) => void) => (res: ServerResponse) => {
  setTimeout(() => then(res), ms);
};

/** Never answers (until the server closes). */
const silence = (_res: ServerResponse) => {};

const sendBody = { type: "invoice.paid", recipients: ["u_8831"], title: "Paid", body: "Thanks" };

function client(url: string, delays: number[], extra: Partial<ConstructorParameters<typeof Herald>[0]> = {}): Herald {
  const c = new Herald({ baseUrl: url, apiKey: "k", maxAttempts: 3, ...extra });
  c.sleep = async (ms) => {
    delays.push(ms);
  };
  return c;
}

describe("the retry policy", () => {
  it("doubles the ceiling from the minimum and caps it at the maximum", () => {
    const p = { minBackoffMs: 100, maxBackoffMs: 1000 };
    assert.deepEqual([1, 2, 3, 4, 5].map((n) => backoffCeiling(n, p)), [200, 400, 800, 1000, 1000]);
  });
  it("draws each delay uniformly between zero and the ceiling (full jitter)", () => {
    const p = { minBackoffMs: 100, maxBackoffMs: 1000 };
    assert.equal(backoffDelay(2, undefined, p, () => 0), 0);
    assert.equal(backoffDelay(2, undefined, p, () => 0.999999), 400);
    assert.equal(backoffDelay(2, undefined, p, () => 0.5), 200);
  });
  it("never waits less than Retry-After asks", () => {
    const p = { minBackoffMs: 100, maxBackoffMs: 1000 };
    assert.equal(backoffDelay(1, 5000, p, () => 0.999999), 5000);
  });
  it("reads Retry-After as seconds or as an HTTP date, and ignores anything else", () => {
    const now = Date.parse("2026-12-07T10:00:00Z");
    assert.equal(parseRetryAfter("3", now), 3000);
    assert.equal(parseRetryAfter("Mon, 07 Dec 2026 10:00:05 GMT", now), 5000);
    assert.equal(parseRetryAfter("Mon, 07 Dec 2026 09:00:00 GMT", now), 0);
    assert.equal(parseRetryAfter("soon", now), undefined);
    assert.equal(parseRetryAfter("-1", now), undefined);
    assert.equal(parseRetryAfter(null, now), undefined);
  });
});

describe("a call against a local server", () => {
  const s = new Script();
  before(() => s.start());
  after(() => {
    s.server.closeAllConnections();
    s.server.close();
  });

  for (const status of [429, 502, 503, 504]) {
    it(`retries a ${status} with the same idempotency key and body`, async () => {
      s.reset(problem(status), json(202, { requestId: "r", notifications: [], deliveries: [], skipped: [] }));
      const delays: number[] = [];
      const res = await client(s.url, delays).send(sendBody);
      assert.equal(s.seen.length, 2);
      const [a, b] = s.seen;
      assert.ok(a.headers["idempotency-key"]);
      assert.equal(a.headers["idempotency-key"], b.headers["idempotency-key"]);
      assert.equal(a.headers["idempotency-key"], res.idempotencyKey);
      assert.equal(a.body, b.body);
      assert.equal(delays.length, 1);
    });
  }

  for (const status of [400, 401, 403, 404, 408, 409, 413, 415, 422, 500]) {
    it(`answers a ${status} at once, without retrying`, async () => {
      s.reset(problem(status), json(202, {}));
      const err = await client(s.url, []).send(sendBody).catch((e) => e);
      assert.ok(err instanceof HeraldError, String(err));
      assert.equal(err.status, status);
      assert.equal(err.problem.status, status);
      assert.equal(err.attempts, 1);
      assert.equal(s.seen.length, 1);
    });
  }

  it("waits at least what Retry-After asks before the retry", async () => {
    s.reset(problem(503, { "Retry-After": "7" }), json(202, { requestId: "r", notifications: [], deliveries: [], skipped: [] }));
    const delays: number[] = [];
    await client(s.url, delays, { maxBackoffMs: 10 }).send(sendBody);
    assert.deepEqual(delays, [7000]);
  });

  it("gives up after maxAttempts with the last answer's error and its Retry-After", async () => {
    s.reset(problem(503, { "Retry-After": "1" }), problem(503, { "Retry-After": "1" }), problem(503, { "Retry-After": "2" }));
    const err = await client(s.url, []).send(sendBody).catch((e) => e);
    assert.ok(err instanceof HeraldError);
    assert.equal(err.status, 503);
    assert.equal(err.retryAfterMs, 2000);
    assert.equal(err.attempts, 3);
    assert.equal(s.seen.length, 3);
    assert.equal(new Set(s.seen.map((x) => x.headers["idempotency-key"])).size, 1);
  });

  it("retries a dropped connection with the same key", async () => {
    s.reset(hangUp, json(202, { requestId: "r", notifications: [], deliveries: [], skipped: [] }));
    await client(s.url, []).send(sendBody);
    assert.equal(s.seen.length, 2);
    assert.equal(s.seen[0].headers["idempotency-key"], s.seen[1].headers["idempotency-key"]);
  });

  it("retries a try that times out", async () => {
    s.reset(silence, json(202, { requestId: "r", notifications: [], deliveries: [], skipped: [] }));
    await client(s.url, [], { attemptTimeoutMs: 200 }).send(sendBody);
    assert.equal(s.seen.length, 2);
  });

  it("gives a send that waits for decisions the wait on top of its try's bound", async () => {
    s.reset(delayed(400, json(202, { requestId: "r", notifications: [], deliveries: [], skipped: [] })));
    await client(s.url, [], { attemptTimeoutMs: 200 }).send(sendBody, { waitSeconds: 1 });
    assert.equal(s.seen.length, 1);
  });

  it("sends its User-Agent", async () => {
    s.reset(json(200, { webhooks: [] }));
    await client(s.url, []).listWebhooks();
    assert.equal(s.seen[0].headers["user-agent"], USER_AGENT);
  });

  it("reports a server that never answers as a connection error after maxAttempts", async () => {
    s.reset(hangUp, hangUp, hangUp);
    const err = await client(s.url, []).send(sendBody).catch((e) => e);
    assert.ok(err instanceof HeraldConnectionError, String(err));
    assert.equal(err.attempts, 3);
    assert.equal(s.seen.length, 3);
  });

  it("stops retrying when the caller aborts", async () => {
    s.reset(problem(503), problem(503), problem(503));
    const ctl = new AbortController();
    const c = new Herald({ baseUrl: s.url, apiKey: "k", maxAttempts: 3 });
    c.sleep = async () => ctl.abort(new Error("caller gave up"));
    const err = await c.send(sendBody, { signal: ctl.signal }).catch((e) => e);
    assert.equal(err.message, "caller gave up");
    assert.equal(s.seen.length, 1);
  });

  it("gives every logical send its own key, and sends the caller's when it has one", async () => {
    s.reset();
    const c = client(s.url, []);
    await c.send(sendBody);
    await c.send(sendBody);
    await c.send(sendBody, { idempotencyKey: "order-7" });
    await c.send({ ...sendBody, idempotencyKey: "order-8" });
    const keys = s.seen.map((x) => x.headers["idempotency-key"]);
    assert.notEqual(keys[0], keys[1]);
    assert.deepEqual(keys.slice(2), ["order-7", "order-8"]);
  });

  it("sends no made-up key with a key-derived id, whose canonical id herald deduplicates on", () => {
    assert.equal(idempotencyKeyFor({ ...sendBody, key: { invoice: "inv_2201" } }), undefined);
    assert.ok(idempotencyKeyFor({ ...sendBody, key: { invoice: "inv_2201" }, dedupeKey: "d" }));
    assert.equal(idempotencyKeyFor({ ...sendBody, key: { invoice: "inv_2201" } }, "given"), "given");
  });

  it("asks to wait with Prefer: wait=N and reads Idempotency-Replayed", async () => {
    s.reset(json(202, { requestId: "r0", notifications: [], deliveries: [], skipped: [] }, { "Idempotency-Replayed": "true" }));
    const res = await client(s.url, []).send(sendBody, { waitSeconds: 5 });
    assert.equal(s.seen[0].headers["prefer"], "wait=5");
    assert.equal(res.replayed, true);
    assert.equal(res.requestId, "r0");
  });

  it("sends the API key, JSON, and escapes path segments", async () => {
    s.reset(json(200, { userId: "a/b", deviceId: "d 1", platform: "ios", enabled: true, createdAt: 1, updatedAt: 1 }));
    await client(s.url, []).registerDevice("a/b", "d 1", { platform: "ios", token: "t" });
    const r = s.seen[0];
    assert.equal(r.method, "PUT");
    assert.equal(r.url, "/v1/users/a%2Fb/devices/d%201");
    assert.equal(r.headers["authorization"], "Bearer k");
    assert.equal(r.headers["content-type"], "application/json");
    assert.deepEqual(JSON.parse(r.body), { platform: "ios", token: "t" });
  });

  it("pages through the feed with nextCursor", async () => {
    const item = (id: string) => ({ notificationId: id, type: "t", title: "x", body: "y", createdAt: 1, read: false });
    s.reset(json(200, { items: [item("a"), item("b")], unreadCount: 3, nextCursor: "c1" }), json(200, { items: [item("c")], unreadCount: 3 }));
    const ids: string[] = [];
    for await (const it of client(s.url, []).feedItems("u 1", { limit: 2 })) ids.push(it.notificationId);
    assert.deepEqual(ids, ["a", "b", "c"]);
    assert.deepEqual(s.seen.map((x) => x.url), ["/v1/recipients/u%201/feed?limit=2", "/v1/recipients/u%201/feed?limit=2&cursor=c1"]);
  });
});

describe("Standard Webhooks signatures (sdk/testdata/webhook_vectors.json, shared with Go and Python)", () => {
  const path = process.env.HERALD_SDK_VECTORS ?? new URL("../../../testdata/webhook_vectors.json", import.meta.url);
  const v = JSON.parse(readFileSync(path, "utf8"));
  for (const s of v.sign) {
    it(`signs ${s.name}`, () => {
      assert.equal(signWebhook(s.secret, s.id, s.timestamp, s.body), s.signature);
    });
  }
  for (const c of v.verify) {
    it(c.name, () => {
      const run = () => verifyWebhook(c.secrets, c.headers, c.body, { now: c.now * 1000, toleranceSeconds: v.toleranceSeconds });
      if (c.ok) assert.equal(run(), c.headers["webhook-id"]);
      else assert.throws(run, WebhookVerificationError);
    });
  }
  it("reads fetch Headers and mixed-case header names alike", () => {
    const s = v.sign[0];
    const sig = signWebhook(s.secret, s.id, s.timestamp, s.body);
    const h = new Headers({ "Webhook-Id": s.id, "Webhook-Timestamp": String(s.timestamp), "Webhook-Signature": sig });
    assert.equal(verifyWebhook(s.secret, h, s.body, { now: s.timestamp * 1000 }), s.id);
    const o = { "Webhook-Id": s.id, "Webhook-Timestamp": String(s.timestamp), "Webhook-Signature": [sig] };
    assert.equal(verifyWebhook(s.secret, o, Buffer.from(s.body), { now: s.timestamp * 1000 }), s.id);
  });
});
