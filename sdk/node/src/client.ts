import { randomUUID } from "node:crypto";

import { HeraldConnectionError, HeraldError } from "./errors.js";
import { backoffDelay, isRetryableStatus, parseRetryAfter, type BackoffPolicy } from "./retry.js";
import type {
  Device,
  DeviceList,
  DeviceRegistration,
  Explanation,
  FeedItem,
  FeedPage,
  FeedReadAll,
  NotificationRecord,
  Preferences,
  PreferencesUpdate,
  Problem,
  Segment,
  SendRequest,
  SendResult,
  Webhook,
  WebhookList,
  WebhookUpdate,
} from "./types.gen.js";

export interface ClientOptions {
  /** The API's root, e.g. "http://127.0.0.1:8080" (herald dev's). */
  baseUrl: string;
  /** Sent as "Authorization: Bearer <apiKey>" (herald dev: "herald-dev-key"). */
  apiKey: string;
  /** Tries of one call, the first included (4 by default). */
  maxAttempts?: number;
  /** Bound of each try (ms, 30 000 by default); a try that times out is retried. */
  attemptTimeoutMs?: number;
  /** The first retry waits a random time up to this (ms, 200 by default). */
  minBackoffMs?: number;
  /** No retry waits longer than this (ms, 10 000 by default), unless Retry-After asks. */
  maxBackoffMs?: number;
  /** The fetch to call (globalThis.fetch by default). */
  fetch?: typeof fetch;
  /** Sent as User-Agent (USER_AGENT by default). */
  userAgent?: string;
}

export interface CallOptions {
  /** Ends the call (and its retries) when aborted. */
  signal?: AbortSignal;
}

export interface SendOptions extends CallOptions {
  /**
   * Names this logical send; sent as Idempotency-Key on every try. When
   * neither this nor the body's idempotencyKey is given, the client makes
   * one per call (a random UUID) — unless the body has a key and no
   * dedupeKey: then the notification's id is the canonical id of (type,
   * recipient, key), which herald deduplicates on, and an idempotency key
   * would change it.
   */
  idempotencyKey?: string;
  /**
   * Prefer: wait=N: wait up to N seconds for the pipeline's decisions (the
   * dedupe stage's, and on herald dev the route stage's deliveries).
   */
  waitSeconds?: number;
}

export interface SendResponse extends SendResult {
  /** True when herald answered with Idempotency-Replayed: true. */
  replayed: boolean;
  /** The Idempotency-Key the call sent (undefined when it sent none). */
  idempotencyKey: string | undefined;
}

export interface FeedOptions extends CallOptions {
  /** Items per page (1–100, 20 by default). */
  limit?: number;
  /** The nextCursor of the previous page. */
  cursor?: string;
}

interface Answer<T> {
  status: number;
  headers: Headers;
  body: T;
}

const enc = encodeURIComponent;

/** The User-Agent sent unless ClientOptions.userAgent replaces it. */
export const USER_AGENT = "heraldhq-node/0.1.0";

/**
 * herald's HTTP API client. Every call is retried on network errors and
 * timeouts, 429, 502, 503 and 504, with exponential backoff and full jitter
 * (honouring Retry-After), never on another 4xx; a send carries the same
 * Idempotency-Key on every try, so a retry is answered as the first try was
 * and never makes a second notification.
 */
export class Herald {
  readonly baseUrl: string;
  readonly #apiKey: string;
  readonly #maxAttempts: number;
  readonly #attemptTimeoutMs: number;
  readonly #backoff: BackoffPolicy;
  readonly #fetch: typeof fetch;
  readonly #userAgent: string | undefined;
  /** The pause between tries; replaced in tests. */
  sleep: (ms: number, signal?: AbortSignal) => Promise<void> = sleep;

  constructor(options: ClientOptions) {
    if (!options.baseUrl) throw new TypeError("herald: baseUrl is required");
    if (!options.apiKey) throw new TypeError("herald: apiKey is required");
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#apiKey = options.apiKey;
    this.#maxAttempts = options.maxAttempts && options.maxAttempts > 0 ? options.maxAttempts : 4;
    this.#attemptTimeoutMs = options.attemptTimeoutMs && options.attemptTimeoutMs > 0 ? options.attemptTimeoutMs : 30_000;
    this.#backoff = { minBackoffMs: options.minBackoffMs ?? 200, maxBackoffMs: options.maxBackoffMs ?? 10_000 };
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#userAgent = options.userAgent;
  }

  /**
   * Sends one logical notification: to recipients[], one recipientId, or a
   * target (user, device, tag, segment, all). Resolves once herald has it
   * durably (202), with each recipient's notification id and status.
   */
  async send(request: SendRequest, options: SendOptions = {}): Promise<SendResponse> {
    const key = idempotencyKeyFor(request, options.idempotencyKey);
    const headers: Record<string, string> = {};
    if (key !== undefined) headers["Idempotency-Key"] = key;
    if (options.waitSeconds !== undefined) headers["Prefer"] = `wait=${Math.max(0, Math.floor(options.waitSeconds))}`;
    // A try waiting for decisions gets the wait and 10 s on top of its bound.
    const timeoutMs = options.waitSeconds === undefined ? undefined : Math.max(0, Math.floor(options.waitSeconds)) * 1000 + 10_000;
    const a = await this.#call<SendResult>("POST", "/v1/notifications", request, headers, options.signal, timeoutMs);
    return { ...a.body, replayed: a.headers.get("Idempotency-Replayed") === "true", idempotencyKey: key };
  }

  /**
   * What herald would decide for this send now (deduplicate, replay,
   * conflict, rate limit, digest, defer, channels and devices), changing
   * nothing. Eventually consistent.
   */
  async explain(request: SendRequest, options: CallOptions & { idempotencyKey?: string } = {}): Promise<Explanation> {
    const headers: Record<string, string> = {};
    if (options.idempotencyKey !== undefined) headers["Idempotency-Key"] = options.idempotencyKey;
    return (await this.#call<Explanation>("POST", "/v1/explain", request, headers, options.signal)).body;
  }

  /** One notification: its first request, status and timeline so far. */
  async getNotification(id: string, options: CallOptions = {}): Promise<NotificationRecord> {
    return (await this.#call<NotificationRecord>("GET", `/v1/notifications/${enc(id)}`, undefined, {}, options.signal)).body;
  }

  /** A user's devices. */
  async listDevices(userId: string, options: CallOptions = {}): Promise<Device[]> {
    return (await this.#call<DeviceList>("GET", `/v1/users/${enc(userId)}/devices`, undefined, {}, options.signal)).body.devices;
  }

  /** One device of a user. */
  async getDevice(userId: string, deviceId: string, options: CallOptions = {}): Promise<Device> {
    return (await this.#call<Device>("GET", devicePath(userId, deviceId), undefined, {}, options.signal)).body;
  }

  /**
   * Registers a device (ios and android: a token; web: a webPush
   * subscription), or replaces it (a new token, tags, enabled). A web
   * device's answer carries its receiptToken, once.
   */
  async registerDevice(userId: string, deviceId: string, registration: DeviceRegistration, options: CallOptions = {}): Promise<Device> {
    return (await this.#call<Device>("PUT", devicePath(userId, deviceId), registration, {}, options.signal)).body;
  }

  /** Removes a device. */
  async deleteDevice(userId: string, deviceId: string, options: CallOptions = {}): Promise<void> {
    await this.#call("DELETE", devicePath(userId, deviceId), undefined, {}, options.signal);
  }

  /** A user's preferences (404 when the user never set any). */
  async getPreferences(userId: string, options: CallOptions = {}): Promise<Preferences> {
    return (await this.#call<Preferences>("GET", prefsPath(userId), undefined, {}, options.signal)).body;
  }

  /** Replaces a user's preferences: channels, opted-out types, quiet hours. */
  async setPreferences(userId: string, preferences: PreferencesUpdate, options: CallOptions = {}): Promise<Preferences> {
    return (await this.#call<Preferences>("PUT", prefsPath(userId), preferences, {}, options.signal)).body;
  }

  /** Removes a user's preferences (back to every channel, no quiet hours). */
  async deletePreferences(userId: string, options: CallOptions = {}): Promise<void> {
    await this.#call("DELETE", prefsPath(userId), undefined, {}, options.signal);
  }

  /** A segment (the recipients of target kind segment). */
  async getSegment(name: string, options: CallOptions = {}): Promise<Segment> {
    return (await this.#call<Segment>("GET", `/v1/segments/${enc(name)}`, undefined, {}, options.signal)).body;
  }

  /** Replaces a segment's members (user ids). */
  async setSegment(name: string, members: string[], options: CallOptions = {}): Promise<Segment> {
    return (await this.#call<Segment>("PUT", `/v1/segments/${enc(name)}`, { members }, {}, options.signal)).body;
  }

  /** Removes a segment. */
  async deleteSegment(name: string, options: CallOptions = {}): Promise<void> {
    await this.#call("DELETE", `/v1/segments/${enc(name)}`, undefined, {}, options.signal);
  }

  /** One page of a recipient's in-app feed, newest first, with the unread count. */
  async getFeed(recipientId: string, options: FeedOptions = {}): Promise<FeedPage> {
    const q = new URLSearchParams();
    if (options.limit !== undefined) q.set("limit", String(options.limit));
    if (options.cursor !== undefined) q.set("cursor", options.cursor);
    const qs = q.toString() ? `?${q}` : "";
    return (await this.#call<FeedPage>("GET", `/v1/recipients/${enc(recipientId)}/feed${qs}`, undefined, {}, options.signal)).body;
  }

  /** Every item of a recipient's feed, newest first, page after page. */
  async *feedItems(recipientId: string, options: Omit<FeedOptions, "cursor"> = {}): AsyncGenerator<FeedItem> {
    let cursor: string | undefined;
    do {
      const page = await this.getFeed(recipientId, { ...options, cursor });
      yield* page.items;
      cursor = page.nextCursor;
    } while (cursor);
  }

  /** Marks one feed item read (idempotent). */
  async markFeedRead(recipientId: string, notificationId: string, options: CallOptions = {}): Promise<void> {
    await this.#call("POST", `/v1/recipients/${enc(recipientId)}/feed/${enc(notificationId)}/read`, undefined, {}, options.signal);
  }

  /** Marks every unread item of a recipient's feed read; resolves to how many. */
  async markAllFeedRead(recipientId: string, options: CallOptions = {}): Promise<number> {
    return (await this.#call<FeedReadAll>("POST", `/v1/recipients/${enc(recipientId)}/feed/read-all`, undefined, {}, options.signal)).body.marked;
  }

  /** The tenant's outbound webhook endpoints, by id. */
  async listWebhooks(options: CallOptions = {}): Promise<Webhook[]> {
    return (await this.#call<WebhookList>("GET", "/v1/webhooks", undefined, {}, options.signal)).body.webhooks;
  }

  /** One outbound webhook endpoint (without its secret). */
  async getWebhook(id: string, options: CallOptions = {}): Promise<Webhook> {
    return (await this.#call<Webhook>("GET", `/v1/webhooks/${enc(id)}`, undefined, {}, options.signal)).body;
  }

  /**
   * Registers an outbound webhook endpoint, or replaces it (idempotent).
   * Only the answer creating it carries its secret (when herald made one):
   * keep it to verify deliveries with verifyWebhook.
   */
  async setWebhook(id: string, update: WebhookUpdate, options: CallOptions = {}): Promise<Webhook> {
    return (await this.#call<Webhook>("PUT", `/v1/webhooks/${enc(id)}`, update, {}, options.signal)).body;
  }

  /** Removes an outbound webhook endpoint. */
  async deleteWebhook(id: string, options: CallOptions = {}): Promise<void> {
    await this.#call("DELETE", `/v1/webhooks/${enc(id)}`, undefined, {}, options.signal);
  }

  /** One call, retried: the same method, path, body and headers on every try. */
  async #call<T>(
    method: string,
    path: string,
    body: unknown,
    extra: Record<string, string>,
    signal: AbortSignal | undefined,
    minTimeoutMs?: number,
  ): Promise<Answer<T>> {
    const timeoutMs = Math.max(this.#attemptTimeoutMs, minTimeoutMs ?? 0);
    const headers: Record<string, string> = {
      ...extra,
      Authorization: `Bearer ${this.#apiKey}`,
      Accept: "application/json, application/problem+json",
    };
    headers["User-Agent"] = this.#userAgent ?? USER_AGENT;
    const payload = body === undefined ? undefined : JSON.stringify(body);
    if (payload !== undefined) headers["Content-Type"] = "application/json";
    for (let attempt = 1; ; attempt++) {
      signal?.throwIfAborted();
      let retryAfterMs: number | undefined;
      try {
        return await this.#once<T>(method, path, payload, headers, signal, attempt, timeoutMs);
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        if (e instanceof HeraldError) {
          if (!isRetryableStatus(e.status) || attempt >= this.#maxAttempts) throw e;
          retryAfterMs = e.retryAfterMs;
        } else if (e instanceof HeraldBadAnswer) {
          throw e;
        } else if (attempt >= this.#maxAttempts) {
          throw new HeraldConnectionError(`herald: ${method} ${path}: no answer after ${attempt} tries: ${describe(e)}`, attempt, e);
        }
      }
      await this.sleep(backoffDelay(attempt, retryAfterMs, this.#backoff), signal);
    }
  }

  /** One try, bounded by attemptTimeoutMs and the caller's signal. */
  async #once<T>(
    method: string,
    path: string,
    payload: string | undefined,
    headers: Record<string, string>,
    signal: AbortSignal | undefined,
    attempt: number,
    timeoutMs: number,
  ): Promise<Answer<T>> {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(new Error(`try timed out after ${timeoutMs} ms`)), timeoutMs);
    const onAbort = () => ctl.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const resp = await this.#fetch(this.baseUrl + path, { method, headers, body: payload, signal: ctl.signal });
      const text = await resp.text();
      if (!resp.ok) {
        const retryAfterMs = parseRetryAfter(resp.headers.get("Retry-After"));
        throw new HeraldError(resp.status, problemOf(resp.status, resp.statusText, text), retryAfterMs, attempt);
      }
      let parsed: unknown;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch (e) {
        throw new HeraldBadAnswer(`herald: ${method} ${path}: the answer (${resp.status}) is not JSON`, e);
      }
      return { status: resp.status, headers: resp.headers, body: parsed as T };
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }
}

/** A 2xx answer the client cannot read: not retried. */
export class HeraldBadAnswer extends Error {
  constructor(message: string, cause: unknown) {
    super(message, { cause });
    this.name = "HeraldBadAnswer";
  }
}

/**
 * The Idempotency-Key a send carries: the caller's (the option, else the
 * body's), else a fresh random one — except for a body with a key and no
 * dedupeKey, whose canonical id herald deduplicates on by itself.
 */
export function idempotencyKeyFor(request: SendRequest, given?: string): string | undefined {
  if (given !== undefined) return given;
  if (request.idempotencyKey !== undefined) return request.idempotencyKey;
  if (request.key !== undefined && request.dedupeKey === undefined) return undefined;
  return randomUUID();
}

function devicePath(userId: string, deviceId: string): string {
  return `/v1/users/${enc(userId)}/devices/${enc(deviceId)}`;
}

function prefsPath(userId: string): string {
  return `/v1/users/${enc(userId)}/preferences`;
}

function problemOf(status: number, statusText: string, text: string): Problem {
  try {
    const p = JSON.parse(text) as Problem;
    if (p && typeof p === "object" && typeof p.title === "string") return p;
  } catch {
    // not a problem body
  }
  return { type: "about:blank", title: statusText || `HTTP ${status}`, status };
}

function describe(e: unknown): string {
  if (e instanceof Error) {
    const c = (e as Error & { cause?: unknown }).cause;
    return c instanceof Error ? `${e.message} (${c.message})` : e.message;
  }
  return String(e);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
