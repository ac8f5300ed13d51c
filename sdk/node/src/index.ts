// herald's Node SDK: the HTTP API client (Herald), its errors, the retry
// policy, Standard Webhooks verification for receivers, and the wire types
// generated from api/openapi.json.

export { Herald, HeraldBadAnswer, USER_AGENT, idempotencyKeyFor } from "./client.js";
export type { CallOptions, ClientOptions, FeedOptions, SendOptions, SendResponse } from "./client.js";
export { HeraldConnectionError, HeraldError } from "./errors.js";
export { backoffCeiling, backoffDelay, defaultBackoff, isRetryableStatus, parseRetryAfter } from "./retry.js";
export type { BackoffPolicy } from "./retry.js";
export { SECRET_PREFIX, WebhookVerificationError, secretKey, signWebhook, verifyWebhook } from "./webhooks.js";
export type { VerifyOptions, WebhookHeaders } from "./webhooks.js";
export * from "./types.gen.js";
