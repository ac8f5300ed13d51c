// Package api owns herald's HTTP API for producer services: sending
// notifications (POST /v1/notifications), reading one back with its
// timeline (GET /v1/notifications/{id}), the dedupe dry run (POST
// /v1/explain), devices, preferences and segments, API-key authentication with
// tenants, and the OpenAPI 3.1 document (api/openapi.json, embedded and
// served at /openapi.json). New returns a Server, an http.Handler that
// `herald api` serves on its own listener and `herald dev` can mount.
//
// # Writes: one record alone, several records in one transaction, grouped
//
// A write of one record (a send to one recipient, a device, a preference,
// a receipt) is produced alone by an idempotent producer with acks=all: a
// single record is atomic without a transaction, and a transaction per
// send would cost the broker markers on every partition it touched. A
// write of several records (a multi-recipient send) goes through one
// transactional producer (acks=all, idempotent) per instance,
// transactional id "herald-api-<instance>", so a multi-recipient send is
// all-or-nothing in Kafka. Such requests that arrive while a transaction
// commits wait and are committed together in the next one (group commit,
// up to MaxBatchRecords records): a failed transaction fails every request
// in it with 503 and nothing of them is visible to read_committed readers.
// A write whose outcome Kafka did not confirm (a commit, or a single
// record's produce, that failed after it was sent) is also a 503, and the
// records may be in Kafka: a retry with the same idempotency or dedupe key
// is then decided as a replay or duplicate. A send with neither key nor a
// notification key gets a random id and cannot be told from a second send
// (the Go, Node and Python clients send an idempotency key unless the send
// names a key, whose canonical id deduplicates its retries).
//
// # History and waiting for decisions
//
// With the audit record configured (Config.Dashboard, ClickHouse: herald
// dev and every production deployment), GET /v1/notifications/{id} reads
// the notification's timeline from the audit, which holds it for a year,
// from any instance; the instance also caches its own sends and the
// decisions it was answered (MaxTracked), for the second or so before the
// audit writer has written them (see history.go). It then reads no
// history from Kafka. Without the audit, the API reads herald.requests,
// herald.decisions, herald.attempts, herald.outcomes and herald.receipts
// read_committed (from Lookback ago) into a read model: a
// notification's timeline lists its requests, the stages' decisions, the
// sinks' attempts (channel, device, result, classification, the provider's
// reason) and each delivery's outcome (status, reason), in time order.
// Attempts and outcomes are keyed by delivery id on their topics and carry
// the notification id and the tenant, which place them. After a restart
// the read model shows a notification only once it has read up to it; in
// steady running it lags the topics by a fetch, up to 50 ms when they are
// quiet (its fetches wait for 64 KiB or 50 ms, see batchedFetchWait). It
// holds the newest MaxTracked notifications, each as the record values it
// was read from (about 630 bytes for a request and its decision), decoded
// when the notification is read: the collector's work does not grow with
// the strings of every record held.
//
// A send waits for its records' dedupe decisions when it asks (Prefer:
// wait=N, capped by MaxWait) and always when it carries an idempotency key
// (bounded by IdempotencyWait): the dedupe stage's decision is the
// authoritative idempotency check. With Config.WaitForRoute it also waits
// for the route stage's decision about each accepted notification and
// answers deliveries[] (channel, device, queued or deferred) and the
// route's skips. Those decisions come by request–reply on Kafka
// (internal/reply): a waiting send's records name this instance's
// partition of herald.replies (reply.For its InstanceID), and each stage
// writes a copy of its decision there in the decision's own transaction.
// An instance reads that one partition, read_committed, from the end
// offset listed before Start returns, so it never reads history, never
// reads what answers other instances, and answers a replay or a conflict
// as soon as the stage has decided; until Start has listed the offset
// sends answer 503. A waiter is registered before the write, and every
// reply to it is committed after Start's listing, so none can be missed.
// Sends that do not wait ask for no reply and cost none. The answer
// (202) lists each notification with its status, plus NotifyKit's
// deliveries[] (the route decisions' deliveries, with WaitForRoute and
// Prefer: wait; else empty) and skipped[{reason}]. If the wait ends first, the undecided notifications
// show "pending": they are durably in Kafka and will be decided; a conflict
// is then visible only in the notification's timeline, and a replay is
// answered like a first send (same ids, this call's request id, no
// Idempotency-Replayed).
//
// # Idempotent replays
//
// A replay is answered from its replay decisions alone: the original
// call's request id (originalRequestId) and each notification's original
// outcome (originalOutcome); the ids derive from the body, so they are the
// original's. That is what the original call answered from its dedupe
// decisions, with Idempotency-Replayed: true. The route stage never sees a
// replay: with WaitForRoute, the replay's deliveries[] and route skips are
// those of the route stage's decision about the original request, found in
// the instance's cache or read model, else in the audit record (see
// replays.go), so a replay answers what the original answered, from any
// instance and after a restart (an original that did not wait for the
// route stage answered none; its replay may list them). A decision of idempotency_conflict
// answers 422 (type .../idempotency-conflict) with the original request id.
// The scope is the dedupe stage's: (tenant, idempotencyKey, type,
// recipient), per recipient. A retry that adds a recipient is therefore a
// replay for the old ones and a new notification for the new one (answered
// 202 without Idempotency-Replayed); a retry whose body differs for any
// recipient is a 422, though recipients the key never saw are sent.
//
// # Explain: asked of the stages
//
// Explain builds the requests a send would make and writes them to
// herald.requests as explains (internal/reply.ExplainHeader), naming this
// instance's reply partition, without a transaction. The dedupe stage, the
// owner of the seen-set, decides each as it would the request at that
// place in its partition and answers the decision on the reply partition;
// with WaitForRoute, an explain it would accept goes on to the route stage
// as an accepted explain (reply.ExplainRoute), and the route stage answers
// what it would decide over its state (rate counters, digests, deferrals,
// devices, preferences). Neither writes anything else (no decision, seen
// entry, state, delivery command or timer), and every other reader skips
// explains. Each stage reads its partition in order, so an explain sees
// every record appended before it: after a send was answered accepted, an
// explain of it says wouldReplay or wouldDeduplicate, and a rate limit it
// used up is seen (consistency read-your-writes). Explain waits at most
// IdempotencyWait for the stages; past that, 503. The API holds neither
// the seen-set nor the route stage's state, except the seen-set with a
// quota (see Quotas).
//
// # Devices, preferences and segments: an eventually consistent replica
//
// The API keeps a read-only replica of the compacted topics
// herald.devices, herald.preferences, herald.segments, the feed and the
// webhook endpoints, read read_committed from their
// start. The replica lags the stages by the time it takes to read a
// committed change. Until the replica has read every partition up to where
// it stood at Start, explain, the device, preference and segment endpoints
// and sends to device targets answer 503 (so do they if a topic is
// missing: herald.segments is new, and `herald topics create` adds it
// before an upgraded API starts; the route stage reads it too, for
// segment targets). Device, preference and
// segment writes are applied to the replica when they commit, so a caller
// reads its own writes on the instance that made them.
//
// Why the replica stays, and what it costs. Since tag, segment and all
// targets are resolved by the route stage, the replica answers the
// registry's own endpoints (GET devices, preferences, segments and
// webhooks; a PUT's 201 or 200), a device target's owner and readiness.
// A compacted topic cannot be read by key, and ClickHouse holds no
// registry: reading it anywhere else would lose read-your-writes on the
// instance that wrote, or need a query answered by the route stage (the
// next step, as explain is, if registries outgrow an instance). Its size
// follows the registry, not the traffic: about 650 bytes of heap a
// registered device (BenchmarkReplicaBytesPerDevice: an iOS device with a
// 64-character token and two tags), so 1M devices cost each instance
// about 650 MB, and the broker serves each instance the registry's
// changes, not the sends. Neither grows with the sends, the live keys of
// the seen-set or the feed (see BENCHMARKS.md, the RSS row).
//
// # Targets
//
// A send names its recipients (recipients[], recipientId) or a target.
// Target kind user is one user; device is one device's user (resolved from
// the replica), and the request record carries the device in
// targetDevice. Tag, segment and all targets are resolved where the
// registry lives, the route stage (processors/route, group.go): the send
// is ONE notification addressed to the group, its recipient
// "@tag:<tag>", "@segment:<name>" or "@all" (routestage.GroupRecipient),
// its id, dedupe key and idempotency key scoped to the group; the dedupe
// stage decides it like any other, and the route stage, which holds every
// device and segment, resolves the members as they are when it routes it
// and writes one notification per member back to herald.accepted, in the
// transaction of the group's decision (exactly once). all is every user of
// the tenant with an enabled device; tag every user with an enabled device
// carrying the tag (devices are tagged when registered); segment the
// members of a segment the tenant set with PUT /v1/segments/{name} (a
// named set of users, which replaces the members; GET and DELETE read and
// remove it). The answer (202) therefore names the group notification,
// not its members: their ids are derived (routestage.FanOutID) and listed
// in the group notification's timeline (the route decision's detail,
// "fanned out to N recipients: u1 (<id>) …") and in explain's
// routeDetail. A group that reaches no one, and a segment that does not
// exist, are accepted and then skipped by the route stage as no_target; a
// group larger than its fan-out limit (10,000 by default) as rejected;
// with WaitForRoute and Prefer: wait, skipped[] shows it. A retry with the
// same idempotency or dedupe key is a replay or duplicate of the group
// notification: members are resolved once, never again. User ids of the
// reserved forms are refused (422) in recipients[], recipientId and
// target.userId. A group counts as one accepted notification against a
// tenant's quota (Quotas), however many members it reaches. An upgraded
// route stage reads herald.segments: run `herald topics create` first
// (until the topic exists it waits, not ready, and says so in its log). Segments resolve within the caller's tenant only:
// another tenant's segment endpoints answer 404.
//
// # Tenants and keys
//
// Each API key belongs to a tenant. Keys are configured as SHA-256 hashes
// (ParseKeys reads "tenant:name:sha256hex" lines); a presented key is
// hashed and compared with every configured hash in constant time. The
// tenant scopes everything: derived ids and seen-set keys include it, the
// read model is keyed by (tenant, id), device, preference and segment keys
// start with it. Another tenant's notification, device, preferences or
// segment answer 404, never 403.
//
// # Validation
//
// Bodies are read up to MaxBodyBytes (413 beyond) and must be UTF-8 JSON
// without lone surrogate escapes (identity reads strings as JavaScript
// does; encoding/json would replace a lone surrogate with U+FFFD, so two
// different JavaScript strings could meet as one), duplicate member names
// or trailing data: 400. Unknown members and wrong types are 400; missing
// or empty required fields, out-of-range values, too many recipients, a
// target member that its kind does not use, a target that reaches no one
// and a time zone (a device's, quiet hours') that is neither UTC nor an
// IANA name time.LoadLocation loads ("Local", the host's zone, included)
// are 422. Every problem is RFC 9457 application/problem+json with an
// errors[{field, message}] extension.
//
// # Dashboard
//
// GET /dashboard serves the dashboard page and GET /dashboard/assets/{name}
// its script, style and vendored Chart.js (public: they hold no data). Its
// data comes from GET /v1/dashboard/... (hit-rate, decisions, attempts,
// outcomes, shown-twice, notifications/{id}/timeline), read from the audit
// record in ClickHouse through Config.Dashboard (package
// analytics/dashboard). They take an API key like every route, and answer
// for the key's tenant only: each runs one analysts' query narrowed to the
// tenant, and the timeline selects the tenant's rows, so another tenant's
// notification is 404. Without Config.Dashboard they answer 503 with the
// problem type dashboard-not-configured; when ClickHouse fails, 503 with
// Retry-After. See api/dashboard.go.
//
// # Quotas
//
// With QuotaPerWindow set, a tenant may have that many accepted
// notifications per QuotaWindow (counted from the dedupe decisions, so
// duplicates and replays never count); a send whose notifications the
// replica says would be accepted is refused with 429 and Retry-After once
// the count is reached, while repeats still pass. Both counts are
// eventually consistent, so a burst can overshoot by what is in flight.
// A quota costs every instance a read of herald.decisions and a copy of
// the whole seen-set (herald.seen, about 100 bytes a live key): without
// one, an instance reads neither.
package api
