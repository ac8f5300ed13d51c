// Standard Webhooks (https://www.standardwebhooks.com) signatures, as herald
// signs its outbound webhooks (sinks/webhook): webhook-id, webhook-timestamp
// (integer Unix seconds) and webhook-signature ("v1," + base64 of
// HMAC-SHA256(key, id + "." + timestamp + "." + body), space-separated when
// there are several), key = the base64-decoded part of the endpoint's
// "whsec_" secret.

import { createHmac, timingSafeEqual } from "node:crypto";

export const SECRET_PREFIX = "whsec_";

/** A message that does not verify; nothing of it should be trusted. */
export class WebhookVerificationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

/** Headers as Node's IncomingMessage, fetch's Headers or a plain object hold them. */
export type WebhookHeaders =
  | Headers
  | Record<string, string | string[] | undefined>;

export interface VerifyOptions {
  /** How far webhook-timestamp may be from now, either way (s); 300 by default. */
  toleranceSeconds?: number;
  /** The clock (ms since the epoch); Date.now by default. */
  now?: number;
}

/** Decodes a "whsec_" secret into its HMAC key (24 to 64 bytes). */
export function secretKey(secret: string): Buffer {
  if (!secret.startsWith(SECRET_PREFIX)) {
    throw new WebhookVerificationError(`a secret starts with ${SECRET_PREFIX}`);
  }
  const b64 = secret.slice(SECRET_PREFIX.length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64) || b64.length % 4 !== 0) {
    throw new WebhookVerificationError("a secret is whsec_ and standard base64");
  }
  const key = Buffer.from(b64, "base64");
  if (key.length < 24 || key.length > 64) {
    throw new WebhookVerificationError(`a secret's key is 24 to 64 bytes, not ${key.length}`);
  }
  return key;
}

/** The webhook-signature value of one message: "v1," and the base64 HMAC. */
export function signWebhook(secret: string, id: string, timestamp: number, body: string | Uint8Array): string {
  const m = createHmac("sha256", secretKey(secret));
  m.update(`${id}.${timestamp}.`);
  m.update(body);
  return "v1," + m.digest("base64");
}

function header(h: WebhookHeaders, name: string): string | undefined {
  if (typeof (h as Headers).get === "function") return (h as Headers).get(name) ?? undefined;
  const rec = h as Record<string, string | string[] | undefined>;
  let v = rec[name];
  if (v === undefined) {
    const k = Object.keys(rec).find((k) => k.toLowerCase() === name);
    v = k === undefined ? undefined : rec[k];
  }
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Verifies a received webhook as a Standard Webhooks consumer does: the
 * three headers are present, webhook-timestamp is within the tolerance of
 * now, and one of the v1 signatures matches one of the secrets (compared in
 * constant time; pass several secrets while rotating). `body` must be the
 * raw bytes received, not re-encoded JSON. Returns the webhook-id (the same
 * on every retry of one event: use it to drop repeats); throws
 * WebhookVerificationError otherwise.
 */
export function verifyWebhook(
  secrets: string | string[],
  headers: WebhookHeaders,
  body: string | Uint8Array,
  options: VerifyOptions = {},
): string {
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const sigs = header(headers, "webhook-signature");
  if (!id || !ts || !sigs) {
    throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature");
  }
  if (!/^\d+$/.test(ts)) {
    throw new WebhookVerificationError("webhook-timestamp is not integer seconds");
  }
  const sec = Number(ts);
  const tolerance = options.toleranceSeconds ?? 300;
  const now = (options.now ?? Date.now()) / 1000;
  if (Math.abs(now - sec) > tolerance) {
    throw new WebhookVerificationError(`webhook-timestamp is ${Math.round(now - sec)} s away from now`);
  }
  const given = sigs.split(" ").filter((s) => s !== "").map((s) => Buffer.from(s));
  for (const secret of Array.isArray(secrets) ? secrets : [secrets]) {
    let want: Buffer;
    try {
      want = Buffer.from(signWebhook(secret, id, sec, body));
    } catch {
      continue; // an unusable secret among several is passed over
    }
    for (const g of given) {
      if (g.length === want.length && timingSafeEqual(g, want)) return id;
    }
  }
  throw new WebhookVerificationError("no signature matches");
}
