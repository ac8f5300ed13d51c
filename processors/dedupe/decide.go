// Package dedupe owns herald's first stage: idempotency and windowed
// deduplication of requests, partitioned by notification id, with the
// compacted topic herald.seen as its seen-set.
//
// Semantics (in this order, for each request):
//
//  1. Idempotency, scope (tenant, idempotencyKey, type, recipient), TTL 24 h
//     by default. A repeat with the same content is an idempotent_replay:
//     the original decision is returned and nothing else happens. A repeat
//     with different content is an idempotency_conflict: audited, nothing
//     sent.
//  2. Deduplication, scope (tenant, dedupeKey, type, recipient) within the
//     request's dedupeWindowMs (else the type's default, else the stage's).
//     A repeat inside the window is a duplicate; at or after the window's
//     end the key is new again. A request without a dedupeKey whose id is
//     the canonical id of (type, recipient, key) is deduplicated on that id.
//     Requests with random ids never deduplicate.
//  3. Otherwise the notification is accepted and emitted for the route stage.
//
// Guaranteed scope. Requests are partitioned by notification id, and the id
// comes from the dedupeKey when there is one, else from the idempotency key.
// So every repeat of a dedupe scope, and every repeat of an idempotency key
// sent without a dedupeKey or with the same dedupeKey, meets its original in
// one partition and is caught. An idempotency key reused with a *different*
// dedupeKey names a different notification in another partition: herald
// treats it as that new notification and does not report a conflict.
// (Catching it would need a second index keyed by the idempotency scope, a
// repartition through another topic; not built.)
//
// Determinism. Decisions depend only on the records and their timestamps
// (record time, never the wall clock), so replaying herald.requests through
// Decide (with the same Policy, SkewAllowanceMs included) reproduces every
// decision. An entry is live for a request stamped before its expiry.
// Expired entries are deleted with a tombstone once the partition's stream
// time (the newest record time seen) passes their expiry plus
// SkewAllowanceMs; an entry found expired at lookup is treated as absent
// whether or not its tombstone was written yet.
//
// Hazard: clocks. Record time is the producer's clock (the API's, or an SDK
// producer's: herald.requests keeps CreateTime). A request stamped Δ ahead
// of the others moves stream time Δ ahead, and would tombstone every entry
// whose window ends before that, early, so that honest repeats inside
// their window were accepted again. Two bounds, both in code:
//   - The stage tombstones an entry only once stream time is
//     SkewAllowanceMs (5 minutes by default) past its expiry. A record
//     stamped at most SkewAllowanceMs ahead cuts no other key's window
//     short; one stamped Δ > SkewAllowanceMs ahead cuts them short by at
//     most Δ − SkewAllowanceMs. The cost: expired entries stay in memory and in
//     herald.seen SkewAllowanceMs longer.
//   - The topic catalog sets message.timestamp.after.max.ms on
//     herald.requests to the same 5 minutes (topics.Options
//     MaxFutureTimestampMs), so a Kafka broker refuses a record stamped
//     further ahead of its own clock (the producer gets INVALID_TIMESTAMP;
//     the API answers 503). With SkewAllowanceMs at least that value, no
//     window is cut short relative to the broker's clock: the record that
//     moves stream time to S was appended when the broker's clock read at
//     least S − allowance, so every entry it tombstones had expired by the
//     broker's clock. kfake (herald dev's embedded broker) ignores that
//     config: there only the first bound holds.
//
// Still assumed: the broker's clock is right, and records reach the broker
// soon after they are stamped. A producer whose clock lags, or whose record
// is appended long after its stamp (a send retried for minutes), is
// measured by its own stamp: its repeat can still meet an entry that
// stream time has expired, or miss one it has tombstoned. Broker
// append time (LogAppendTime) on herald.requests was not chosen: it would
// also remove producer skew, but then the SDK's and the tests' event times
// are overwritten on append, requests copied to another cluster get new
// times (decisions there would not reproduce the audit), and the window
// would start at arrival, not at the producer's send.
package dedupe

import (
	"fmt"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// Policy holds the stage's configurable windows.
type Policy struct {
	// DefaultWindowMs applies to requests without dedupeWindowMs whose type
	// has no entry in TypeWindowMs.
	DefaultWindowMs int64
	TypeWindowMs    map[string]int64
	// IdempotencyTTLMs applies to requests without idempotencyTtlMs.
	IdempotencyTTLMs int64
	// SkewAllowanceMs is how far ahead of the other producers' clocks a
	// record may be stamped without expiring anyone else's seen entry
	// early: an entry is tombstoned only once stream time has passed its
	// expiry by this much (see "Hazard: clocks"). Keep it at least the
	// message.timestamp.after.max.ms of herald.requests
	// (topics.Options.MaxFutureTimestampMs); 0 gives no allowance.
	SkewAllowanceMs int64
}

// DefaultSkewAllowanceMs is five minutes (the clock skew Kerberos
// tolerates), the topic catalog's default message.timestamp.after.max.ms
// of herald.requests.
const DefaultSkewAllowanceMs = topics.DefaultMaxFutureTimestampMs

// DefaultPolicy: a one hour dedupe window, a 24 hour idempotency TTL, a
// five minute skew allowance.
func DefaultPolicy() Policy {
	return Policy{DefaultWindowMs: 3600_000, IdempotencyTTLMs: 24 * 3600_000, SkewAllowanceMs: DefaultSkewAllowanceMs}
}

// Source locates the request being decided.
type Source struct {
	Topic     string
	Partition int32
	Offset    int64
}

// SeenChange sets (Entry non-nil) or deletes one seen-set key.
type SeenChange struct {
	Key   string
	Entry *schemas.SeenEntry
}

// Result is everything one request produces.
type Result struct {
	Decision schemas.Decision
	Seen     []SeenChange
	// Accepted is nil unless the request was accepted.
	Accepted *schemas.Accepted
	// AlreadyApplied is true when the seen-set already holds this very
	// request (same source position): nothing must be emitted again.
	AlreadyApplied bool
}

// Lookup returns the live or expired entry under key, if any.
type Lookup func(key string) (schemas.SeenEntry, bool)

// Decide is the stage's pure decision function: the request, its record
// time, its position and the seen-set in; the decision and its effects out.
func (p Policy) Decide(req schemas.Request, at int64, src Source, lookup Lookup) Result {
	d := schemas.Decision{
		DecisionID:      fmt.Sprintf("dedupe/%s/%d/%d", src.Topic, src.Partition, src.Offset),
		Stage:           "dedupe",
		RequestID:       req.RequestID,
		Tenant:          req.Tenant,
		Type:            req.Type,
		Recipient:       req.Recipient,
		NotificationID:  req.NotificationID,
		DedupeKey:       req.DedupeKey,
		IdempotencyKey:  req.IdempotencyKey,
		Producer:        req.Producer,
		At:              at,
		SourceTopic:     src.Topic,
		SourcePartition: src.Partition,
		SourceOffset:    src.Offset,
	}
	if msg := invalid(req); msg != "" {
		d.Outcome, d.Detail = schemas.DecisionRejected, msg
		return Result{Decision: d}
	}
	live := func(key string) (schemas.SeenEntry, bool) {
		e, ok := lookup(key)
		return e, ok && at < e.ExpiresAt
	}
	repeat := func(e schemas.SeenEntry) {
		d.OriginalRequestID = e.RequestID
		d.OriginalNotificationID = e.NotificationID
		d.OriginalAt = e.FirstAt
		d.OriginalOutcome = e.Outcome
	}
	contentHash := req.ContentHash()

	var idemKey string
	if req.IdempotencyKey != "" {
		idemKey = schemas.SeenKey(schemas.SeenIdempotency, identity.IdempotencyID(req.Tenant, req.Type, req.Recipient, req.IdempotencyKey))
		if e, ok := live(idemKey); ok {
			if e.SourcePartition == src.Partition && e.SourceOffset == src.Offset {
				return Result{AlreadyApplied: true}
			}
			repeat(e)
			if e.ContentHash != contentHash {
				d.Outcome = schemas.DecisionIdempotencyConflict
				d.Detail = "idempotency key reused with a different body"
			} else {
				d.Outcome = schemas.DecisionIdempotentReplay
			}
			return Result{Decision: d}
		}
	}

	var dedupeKey string
	if req.DedupeKey != "" {
		dedupeKey = schemas.SeenKey(schemas.SeenDedupe, identity.DedupeID(req.Tenant, req.Type, req.Recipient, req.DedupeKey))
	} else if req.IDSource == "key" {
		// The canonical id has no tenant in it: scope it by tenant here.
		dedupeKey = schemas.SeenKey(schemas.SeenDedupe, identity.DedupeID(req.Tenant, req.Type, req.Recipient, "herald:id:"+req.NotificationID))
	}
	entry := func(kind schemas.SeenKind, key string, expires int64, outcome string) SeenChange {
		return SeenChange{Key: key, Entry: &schemas.SeenEntry{
			Kind: kind, Scope: key[len(kind)+1:], NotificationID: req.NotificationID, RequestID: req.RequestID,
			ContentHash: contentHash, Outcome: outcome, FirstAt: at, ExpiresAt: expires,
			SourcePartition: src.Partition, SourceOffset: src.Offset,
		}}
	}
	var res Result
	if dedupeKey != "" {
		if e, ok := live(dedupeKey); ok {
			if e.SourcePartition == src.Partition && e.SourceOffset == src.Offset {
				return Result{AlreadyApplied: true}
			}
			repeat(e)
			d.Outcome = schemas.DecisionDuplicate
			res.Decision = d
			if idemKey != "" {
				// A replay of this idempotency key must answer what this
				// request got: duplicate.
				res.Seen = append(res.Seen, entry(schemas.SeenIdempotency, idemKey, at+p.ttl(req), schemas.DecisionDuplicate))
			}
			return res
		}
	}

	d.Outcome = schemas.DecisionAccepted
	res.Decision = d
	if dedupeKey != "" {
		res.Seen = append(res.Seen, entry(schemas.SeenDedupe, dedupeKey, at+p.window(req), schemas.DecisionAccepted))
	}
	if idemKey != "" {
		res.Seen = append(res.Seen, entry(schemas.SeenIdempotency, idemKey, at+p.ttl(req), schemas.DecisionAccepted))
	}
	res.Accepted = &schemas.Accepted{
		NotificationID: req.NotificationID, RequestID: req.RequestID, Tenant: req.Tenant, Type: req.Type,
		Recipient: req.Recipient, Title: req.Title, Body: req.Body, Payload: req.Payload, Locale: req.Locale,
		Channels: req.Channels, TargetDevice: req.TargetDevice, DedupeKey: req.DedupeKey, IdempotencyKey: req.IdempotencyKey, Producer: req.Producer,
		RequestedAt: req.CreatedAt, AcceptedAt: at,
	}
	return res
}

func (p Policy) window(req schemas.Request) int64 {
	if req.DedupeWindowMs > 0 {
		return req.DedupeWindowMs
	}
	if w, ok := p.TypeWindowMs[req.Type]; ok && w > 0 {
		return w
	}
	return p.DefaultWindowMs
}

func (p Policy) ttl(req schemas.Request) int64 {
	if req.IdempotencyTTLMs > 0 {
		return req.IdempotencyTTLMs
	}
	return p.IdempotencyTTLMs
}

// invalid names what makes a request undecidable, or returns "".
func invalid(r schemas.Request) string {
	if r.Tenant == "" {
		return "tenant is empty"
	}
	if r.Type == "" {
		return "type is empty"
	}
	if r.Recipient == "" {
		return "recipient is empty"
	}
	if !identity.Valid(r.NotificationID) {
		return "notificationId is not 32 lower-case hex characters"
	}
	if r.IDSource == "dedupe_key" && r.NotificationID != identity.DedupeID(r.Tenant, r.Type, r.Recipient, r.DedupeKey) {
		return "notificationId is not the id of its dedupeKey"
	}
	if r.IDSource == "idempotency_key" && (r.DedupeKey != "" || r.NotificationID != identity.IdempotencyID(r.Tenant, r.Type, r.Recipient, r.IdempotencyKey)) {
		return "notificationId is not the id of its idempotencyKey"
	}
	if r.DedupeWindowMs < 0 {
		return "dedupeWindowMs is negative"
	}
	if r.IdempotencyTTLMs < 0 {
		return "idempotencyTtlMs is negative"
	}
	return ""
}
