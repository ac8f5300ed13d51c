// The retry policy: which answers are retried, and how long to wait.

/** Bounds of the wait between tries. */
export interface BackoffPolicy {
  /** The first retry waits up to this (ms). */
  minBackoffMs: number;
  /** No wait is longer than this (ms), except what Retry-After asks. */
  maxBackoffMs: number;
}

export const defaultBackoff: BackoffPolicy = { minBackoffMs: 200, maxBackoffMs: 10_000 };

/**
 * The longest wait before retry n (1-based): min(max, min·2ⁿ), as the Go
 * SDK's (internal/backoff).
 */
export function backoffCeiling(n: number, p: BackoffPolicy = defaultBackoff): number {
  const lo = p.minBackoffMs > 0 ? p.minBackoffMs : defaultBackoff.minBackoffMs;
  const hi = Math.max(lo, p.maxBackoffMs > 0 ? p.maxBackoffMs : defaultBackoff.maxBackoffMs);
  return Math.min(hi, lo * 2 ** Math.max(0, n));
}

/**
 * The wait before retry n (1-based): full jitter, a uniformly random time in
 * [0, backoffCeiling(n)], but never less than the server's Retry-After.
 */
export function backoffDelay(
  n: number,
  retryAfterMs: number | undefined,
  p: BackoffPolicy = defaultBackoff,
  random: () => number = Math.random,
): number {
  const d = Math.floor(random() * (backoffCeiling(n, p) + 1));
  return Math.max(d, retryAfterMs ?? 0);
}

/**
 * Parses a Retry-After header (RFC 9110: delay-seconds or an HTTP-date) into
 * ms from now; undefined when absent or malformed.
 */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (value == null) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  if (!/[A-Za-z]/.test(v)) return undefined; // an HTTP-date names its day and month
  const t = Date.parse(v);
  if (Number.isNaN(t)) return undefined;
  return Math.max(0, t - now);
}

/**
 * Whether an answer with this status may succeed when the same call is
 * tried again: 429 (too many requests) and 503 (unavailable, herald's
 * answer while Kafka or an index is not ready), and the gateway answers 502
 * and 504 a proxy gives when herald is unreachable. Never any other 4xx: a
 * 4xx says the request itself is wrong.
 */
export function isRetryableStatus(status: number): boolean {
  return status === 429 || status === 502 || status === 503 || status === 504;
}
