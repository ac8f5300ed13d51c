import type { Problem } from "./types.gen.js";

/** An answer other than 2xx: its status and problem details (RFC 9457). */
export class HeraldError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** The problem body; a minimal one when the body was not a problem. */
  readonly problem: Problem;
  /** The server's Retry-After (ms), when it sent one. */
  readonly retryAfterMs: number | undefined;
  /** How many tries the call made. */
  readonly attempts: number;

  constructor(status: number, problem: Problem, retryAfterMs: number | undefined, attempts: number) {
    super(
      problem.detail
        ? `herald: ${status} ${problem.title}: ${problem.detail}`
        : `herald: ${status} ${problem.title}`,
    );
    this.name = "HeraldError";
    this.status = status;
    this.problem = problem;
    this.retryAfterMs = retryAfterMs;
    this.attempts = attempts;
  }

  /** Whether retrying the same call may succeed (the client already did). */
  get retryable(): boolean {
    return this.status === 429 || this.status === 502 || this.status === 503 || this.status === 504;
  }

  /** The offending fields of a 400 or 422, by name. */
  get fieldErrors(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const e of this.problem.errors ?? []) out[e.field] = e.message;
    return out;
  }
}

/**
 * The call never got an answer: every try failed in the network (refused,
 * reset, DNS, timed out). `cause` is the last try's error.
 */
export class HeraldConnectionError extends Error {
  readonly attempts: number;
  constructor(message: string, attempts: number, cause: unknown) {
    super(message, { cause });
    this.name = "HeraldConnectionError";
    this.attempts = attempts;
  }
}
