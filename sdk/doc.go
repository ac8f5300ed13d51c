// Package sdk is herald's Go SDK for producer services. It owns three ways
// of talking to herald and the wire types they share with the HTTP API:
//
//   - [NotificationID] and [DeriveID]: the canonical notification id (a
//     re-export of identity.NotificationID) and the rule that picks a send's
//     id from its dedupeKey, idempotencyKey or key, so a producer can know an
//     id before it sends.
//   - [Client]: the HTTP API client. Each logical send gets one idempotency
//     key, derived once (the caller's, or a fresh random one, except for a
//     send whose id comes from its key) and sent on every attempt; transient failures (5xx, timeouts, connection errors,
//     429 with Retry-After) are retried with exponential backoff and full
//     jitter, never changing the key, so a retry after a timeout is answered
//     as the original was and never makes a second notification.
//   - [Producer]: writes herald.request records (v2, Protocol Buffers, by
//     default; v1, JSON, with ProducerConfig.Format) straight to the requests
//     topic with franz-go (acks=all, idempotent; optionally transactional so
//     a multi-recipient send is all-or-nothing), keyed by notification id
//     and placed with the topics catalog's partitioner.
//
// The wire types ([Notification], [SendResult], [Problem], ...) are the JSON
// of api/openapi.json; the HTTP API encodes its answers with them, and
// TestGoTypesMatchTheOpenAPISchemas checks them against its schemas.
//
// The Node and Python SDKs live in sdk/node and sdk/python: their wire types
// are generated from api/openapi.json by sdk/gen (whose test fails when the
// committed ones drift), they share the Standard Webhooks vectors of
// testdata/webhook_vectors.json with TestHeraldSignsAndVerifiesTheSharedWebhookVectors,
// and sdk/test runs their tests against herald dev.
package sdk

//go:generate go run ./gen -root ..
