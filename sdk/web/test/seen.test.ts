import { test } from "node:test";
import assert from "node:assert/strict";
import { IDBFactory } from "fake-indexeddb";
import "fake-indexeddb/auto";
import { SeenSet } from "../src/seen.js";
import { handlePush } from "../src/push.js";

// Each test gets its own IndexedDB (a fresh factory), so none sees another's ids.
function fresh(opts: { maxAgeMs?: number; maxEntries?: number; now?: () => number } = {}) {
  const idb = new IDBFactory();
  return { idb, seen: new SeenSet({ indexedDB: idb, ...opts }) };
}

test("a first claim of an id wins and a second loses", async () => {
  const { seen } = fresh();
  assert.equal(await seen.claim("a"), true);
  assert.equal(await seen.claim("a"), false);
  assert.equal(await seen.claim("b"), true);
});

test("two claims of one id at once: exactly one wins", async () => {
  for (const n of [2, 5]) {
    const { seen } = fresh();
    const wins = (await Promise.all(Array.from({ length: n }, () => seen.claim("x")))).filter(Boolean);
    assert.equal(wins.length, 1, `${n} concurrent claims`);
  }
});

test("two service-worker instances on one database: one claim wins (survives a restart)", async () => {
  const idb = new IDBFactory();
  const first = new SeenSet({ indexedDB: idb });
  assert.equal(await first.claim("r"), true);
  await first.close();
  const second = new SeenSet({ indexedDB: idb });
  assert.equal(await second.claim("r"), false);
  // and at once, from two instances
  const [a, b] = await Promise.all([new SeenSet({ indexedDB: idb }).claim("s"), second.claim("s")]);
  assert.equal(Number(a) + Number(b), 1);
});

test("an id older than the age bound is forgotten and claimed again", async () => {
  let now = 1_000_000;
  const { seen } = fresh({ maxAgeMs: 100, now: () => now });
  assert.equal(await seen.claim("old"), true);
  now += 100;
  assert.equal(await seen.claim("old"), false, "at exactly the bound it is still seen");
  now += 1;
  assert.equal(await seen.claim("old"), true, "past the bound it is forgotten");
});

test("entries past the age bound are pruned from storage", async () => {
  let now = 1_000_000;
  const { seen } = fresh({ maxAgeMs: 100, now: () => now });
  for (const id of ["a", "b", "c"]) await seen.claim(id);
  now += 500;
  await seen.claim("d");
  assert.equal(await seen.size(), 1);
  assert.equal(await seen.has("d"), true);
});

test("the set keeps at most maxEntries, forgetting the oldest", async () => {
  let now = 0;
  const { seen } = fresh({ maxEntries: 3, now: () => ++now });
  for (const id of ["1", "2", "3", "4", "5"]) assert.equal(await seen.claim(id), true);
  assert.equal(await seen.size(), 3);
  assert.deepEqual(
    await Promise.all(["1", "2", "3", "4", "5"].map((id) => seen.has(id))),
    [false, false, true, true, true],
  );
});

test("handlePush", async (t) => {
  const cases: { name: string; pushes: (string | null)[]; shown: string[]; outcomes: string[] }[] = [
    {
      name: "one payload twice shows one notification tagged with its id",
      pushes: [JSON.stringify({ id: "n1", title: "T", body: "B", url: "/x" }), JSON.stringify({ id: "n1", title: "T" })],
      shown: ["n1"],
      outcomes: ["shown", "duplicate"],
    },
    {
      name: "two ids show two",
      pushes: [JSON.stringify({ id: "n1", title: "T" }), JSON.stringify({ id: "n2", title: "T" })],
      shown: ["n1", "n2"],
      outcomes: ["shown", "shown"],
    },
    {
      name: "a later occurrence of a notification is shown again under the same tag, a repeat of one occurrence is dropped",
      pushes: [
        JSON.stringify({ id: "n1", occurrenceId: "o1", title: "T" }),
        JSON.stringify({ id: "n1", occurrenceId: "o1", title: "T" }),
        JSON.stringify({ id: "n1", occurrenceId: "o2", title: "T" }),
      ],
      shown: ["n1", "n1"],
      outcomes: ["shown", "duplicate", "shown"],
    },
    {
      name: "a payload that is not herald's is dropped",
      pushes: [null, "not json", JSON.stringify({ title: "no id" }), JSON.stringify({ id: "", title: "T" }), "[1]"],
      shown: [],
      outcomes: ["invalid", "invalid", "invalid", "invalid", "invalid"],
    },
  ];
  for (const c of cases) {
    await t.test(c.name, async () => {
      const { seen } = fresh();
      const shown: { title: string; opts: NotificationOptions }[] = [];
      const deps = { seen, show: async (title: string, opts: NotificationOptions) => void shown.push({ title, opts }) };
      const outcomes = [];
      for (const p of c.pushes) outcomes.push(await handlePush(p, deps));
      assert.deepEqual(outcomes, c.outcomes);
      assert.deepEqual(shown.map((s) => s.opts.tag), c.shown);
    });
  }
  await t.test("one payload delivered twice at once shows one", async () => {
    const { seen } = fresh();
    let shown = 0;
    const deps = { seen, show: async () => void shown++ };
    const p = JSON.stringify({ id: "same", title: "T" });
    const outcomes = await Promise.all([handlePush(p, deps), handlePush(p, deps)]);
    assert.equal(shown, 1);
    assert.deepEqual(outcomes.sort(), ["duplicate", "shown"]);
  });
  await t.test("the notification carries the payload as data, for the click's url", async () => {
    const { seen } = fresh();
    let got: NotificationOptions | undefined;
    await handlePush(JSON.stringify({ id: "u", title: "T", body: "B", url: "https://example.test/a" }), {
      seen,
      show: async (_t, o) => void (got = o),
    });
    assert.deepEqual(got, { tag: "u", body: "B", data: { id: "u", title: "T", body: "B", url: "https://example.test/a" } });
  });
});
