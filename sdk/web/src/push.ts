// The service worker's decision on one push, apart from the service-worker
// globals so node's test runner can drive it.

import type { SeenSet } from "./seen.js";

/** The JSON herald's Web Push sink encrypts (sinks/webpush Payload). */
export interface Payload {
  id: string;
  title: string;
  body?: string;
  url?: string;
}

/** What handlePush did with one push. */
export type Outcome = "shown" | "duplicate" | "invalid";

export interface PushDeps {
  seen: Pick<SeenSet, "claim">;
  show: (title: string, options: NotificationOptions) => Promise<void>;
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
  if (typeof o.body === "string") p.body = o.body;
  if (typeof o.url === "string") p.url = o.url;
  return p;
}

/**
 * handlePush shows the push's notification unless its id was seen: the id is
 * claimed in the seen-set first, so of two pushes of one id (a push service
 * delivering twice, two sends racing a replaced subscription) only the one
 * whose claim wins is shown, and the notification's tag is the id, so the
 * browser replaces rather than stacks even if the seen-set was lost.
 */
export async function handlePush(text: string | undefined | null, deps: PushDeps): Promise<Outcome> {
  const p = parsePayload(text);
  if (!p) return "invalid";
  if (!(await deps.seen.claim(p.id))) return "duplicate";
  await deps.show(p.title, { tag: p.id, body: p.body, data: p });
  return "shown";
}
