// Receipts: what this browser tells herald about a notification
// (POST /v1/receipts with the device's receipt token): displayed when the
// service worker showed it, opened on notificationclick, dropped when the
// seen-set dropped a repeat. herald derives the receipt's id from the
// notification's occurrence, the device and the kind, so a receipt sent again (a retry
// after a lost answer) counts once in the audit: retrying is always safe.

import type { DeviceRecord } from "./device.js";
import type { Payload } from "./push.js";

export type ReceiptKind = "displayed" | "opened" | "dropped";

/** What sendReceipt did: sent (202), no-device (never registered: nothing
 * to send with), refused (a 4xx, e.g. a token superseded by a newer
 * registration: not retried), failed (retries exhausted). */
export type ReceiptOutcome = "sent" | "no-device" | "refused" | "failed";

export interface ReceiptDeps {
  device: { get(): Promise<DeviceRecord | undefined> };
  fetch: typeof fetch;
  /** Attempts in all (default 4), waiting backoffMs, then twice as long, between. */
  attempts?: number;
  backoffMs?: number;
  sleep?: (ms: number) => Promise<void>;
  now?: () => number;
}

const sleepReal = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * sendReceipt reports kind for the notification p. A network error, a 429
 * or a 5xx is retried with the same body; any other answer ends it.
 */
export async function sendReceipt(deps: ReceiptDeps, p: Payload, kind: ReceiptKind): Promise<ReceiptOutcome> {
  const dev = await deps.device.get();
  if (!dev || !dev.token) return "no-device";
  const body: Record<string, unknown> = { notificationId: p.id, kind, at: (deps.now ?? Date.now)() };
  if (p.occurrenceId) body.occurrenceId = p.occurrenceId;
  if (p.type) body.type = p.type;
  const init: RequestInit = {
    method: "POST",
    headers: { Authorization: `Bearer ${dev.token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  };
  const attempts = deps.attempts ?? 4;
  const sleep = deps.sleep ?? sleepReal;
  let wait = deps.backoffMs ?? 500;
  for (let i = 1; ; i++) {
    try {
      const res = await deps.fetch(`${dev.base}/v1/receipts`, init);
      if (res.ok) return "sent";
      if (res.status !== 429 && res.status < 500) return "refused";
    } catch {
      // a network error: retried like a 5xx
    }
    if (i >= attempts) return "failed";
    await sleep(wait);
    wait *= 2;
  }
}
