// The service worker's decision on one push, apart from the service-worker
// globals so node's test runner can drive it.

import type { SeenSet } from "./seen.js";

/** The JSON herald's Web Push sink encrypts (sinks/webpush Payload). */
export interface Payload {
  /** The notification id: the shown notification's tag, so a later
   * occurrence replaces an earlier one on screen. */
  id: string;
  /** Which acceptance of the notification this push is (herald accepts a
   * dedupe key again once its window has passed: a new occurrence of the
   * same id). The seen-set drops a repeat of one occurrence and shows a
   * later one. Absent in pushes of notifications accepted before herald
   * had occurrences: the id stands for it. */
  occurrenceId?: string;
  title: string;
  body?: string;
  url?: string;
  /** The notification's type, repeated in receipts. */
  type?: string;
}

/** What handlePush did with one push. */
export type Outcome = "shown" | "duplicate" | "invalid";

export interface PushDeps {
  seen: Pick<SeenSet, "claim">;
  show: (title: string, options: NotificationOptions) => Promise<void>;
  /** Reports a receipt to herald: displayed once shown, dropped for a
   * repeat the seen-set dropped. Its failure never changes the outcome. */
  report?: (p: Payload, kind: "displayed" | "dropped") => Promise<unknown>;
}

/**
 * parsePayload returns the payload of a push's text, or undefined when it is
 * not herald's JSON (no string id and title).
 */
export function parsePayload(text: string | undefined | null): Payload | undefined {
  if (!text) return undefined;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof v !== "object" || v === null) return undefined;
  const o = v as Record<string, unknown>;
  if (typeof o.id !== "string" || o.id === "" || typeof o.title !== "string") return undefined;
  const p: Payload = { id: o.id, title: o.title };
  if (typeof o.occurrenceId === "string" && o.occurrenceId !== "") p.occurrenceId = o.occurrenceId;
  if (typeof o.body === "string") p.body = o.body;
  if (typeof o.url === "string") p.url = o.url;
  if (typeof o.type === "string" && o.type !== "") p.type = o.type;
  return p;
}

/**
 * handlePush shows the push's notification unless its occurrence was seen,
 * and reports displayed or dropped (deps.report): the occurrence id (or the
 * id, for a push without one) is claimed in the seen-set first, so of two
 * pushes of one occurrence (a push service delivering twice, two sends
 * racing a replaced subscription) only the one whose claim wins is shown,
 * while a later occurrence of the notification is shown again. The
 * notification's tag is the id, so the browser replaces rather than stacks
 * even if the seen-set was lost.
 */
export async function handlePush(text: string | undefined | null, deps: PushDeps): Promise<Outcome> {
  const p = parsePayload(text);
  if (!p) return "invalid";
  if (!(await deps.seen.claim(p.occurrenceId ?? p.id))) {
    await report(deps, p, "dropped");
    return "duplicate";
  }
  await deps.show(p.title, { tag: p.id, body: p.body, data: p });
  await report(deps, p, "displayed");
  return "shown";
}

async function report(deps: PushDeps, p: Payload, kind: "displayed" | "dropped"): Promise<void> {
  if (!deps.report) return;
  try {
    await deps.report(p, kind);
  } catch (err) {
    console.error("herald: receipt", kind, err);
  }
}

export interface ClickDeps {
  /** Opens a window on url (clients.openWindow). */
  open: (url: string) => Promise<unknown>;
  report?: (p: Payload, kind: "opened") => Promise<unknown>;
}

/**
 * handleClick answers a notificationclick on one of herald's notifications
 * (data is the notification's data, the payload): opens its url, if any,
 * and reports opened, at once. Data that is not herald's payload is left
 * alone. Neither step's failure stops the other.
 */
export async function handleClick(data: unknown, deps: ClickDeps): Promise<Payload | undefined> {
  const p = parsePayload(JSON.stringify(data ?? null));
  if (!p) return undefined;
  const work: Promise<unknown>[] = [];
  if (p.url) work.push(deps.open(p.url));
  if (deps.report) work.push(deps.report(p, "opened"));
  for (const r of await Promise.allSettled(work)) {
    if (r.status === "rejected") console.error("herald: notificationclick", r.reason);
  }
  return p;
}
