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
// Expired entries are deleted once the partition's stream time (the newest
// record time seen) passes their expiry plus SkewAllowanceMs; an entry
// found expired at lookup is treated as absent whether or not it was
// deleted yet. On herald.seen the entries of one transaction and one
// expiry bucket are one record, tombstoned once every entry in it is
// deleted, and a restore deletes what the stage had deleted, so a
// restored stage decides as the one before it (batch.go; the per-key
// layout of earlier versions, a record and a tombstone a key, is still
// read, and written on request for a rolling upgrade).
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
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/schemas/seenpb"
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

// OrDefault is p, or DefaultPolicy when p sets neither a window nor a TTL
// (the zero Policy): what New and the API decide with.
func (p Policy) OrDefault() Policy {
	if p.DefaultWindowMs == 0 && p.IdempotencyTTLMs == 0 {
		return DefaultPolicy()
	}
	return p
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
// The Task runs the same decision (decide) over its seen-set in memory.
func (p Policy) Decide(req schemas.Request, at int64, src Source, lookup Lookup) Result {
	return p.decideOver(req, at, src, lookupStore{lookup: lookup})
}

// decideOver is Decide over a seenStore whose strings the Result may keep.
func (p Policy) decideOver(req schemas.Request, at int64, src Source, st seenStore) Result {
	var e effects
	p.decide(&req, at, src, st, &e)
	if e.applied {
		return Result{AlreadyApplied: true}
	}
	res := Result{Decision: e.decision}
	content := ""
	if e.hasSum {
		content = hex.EncodeToString(e.sum[:])
	}
	for i := range e.n {
		c := &e.changes[i]
		scope := hex.EncodeToString(c.key.id[:])
		entry := c.entry(&req, scope, content)
		res.Seen = append(res.Seen, SeenChange{Key: schemas.SeenKey(entry.Kind, scope), Entry: &entry})
	}
	if e.accepted {
		a := acceptedOf(&req, at, identity.OccurrenceID(req.NotificationID, at))
		res.Accepted = &a
	}
	return res
}

// seenStore is the seen-set as decide reads it, and how it makes the
// strings of a decision.
type seenStore interface {
	// get returns the live or expired entry under k, if any.
	get(k seenKey) (seenVal, seenStrings, bool)
	// hexString returns id in hex.
	hexString(id [16]byte) string
	// decisionID returns the id of the decision about the request at src.
	decisionID(src Source) string
}

// lookupStore is Decide's seenStore: a Lookup by herald.seen key.
type lookupStore struct {
	freshStrings
	lookup Lookup
}

func (l lookupStore) get(k seenKey) (seenVal, seenStrings, bool) {
	e, ok := l.lookup(string(k.appendKey(nil)))
	if !ok {
		return seenVal{}, seenStrings{}, false
	}
	v, s := valOf(&e)
	return v, s, true
}

// freshStrings makes a seenStore's strings each in a new allocation, for
// a Result its caller keeps (Decide's stores; the Task writes into its
// slab instead).
type freshStrings struct{}

func (freshStrings) hexString(id [16]byte) string { return hex.EncodeToString(id[:]) }

func (freshStrings) decisionID(src Source) string { return string(appendDecisionID(nil, src)) }

// appendDecisionID appends "dedupe/<topic>/<partition>/<offset>".
func appendDecisionID(b []byte, src Source) []byte {
	b = append(b, "dedupe/"...)
	b = append(b, src.Topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(src.Partition), 10)
	b = append(b, '/')
	return strconv.AppendInt(b, src.Offset, 10)
}

// effects is what decide found for one request: the decision, the
// seen-set entries to write and whether the request is accepted.
type effects struct {
	decision schemas.Decision
	changes  [2]change
	n        int
	accepted bool
	// applied: the seen-set already holds this very request (same source
	// position): nothing must be emitted again.
	applied bool
	// sum is the request's content hash, computed (hasSum) only for a
	// request with an idempotency key, the only one whose content is ever
	// compared.
	sum    [sha256.Size]byte
	hasSum bool
}

// change is one seen-set entry decide writes.
type change struct {
	key  seenKey
	val  seenVal
	strs seenStrings
}

// entry is the herald.seen record of c, made by the request req; scope is
// c's id in hex, content the request's content hash in hex (or "").
func (c *change) entry(req *schemas.Request, scope, content string) schemas.SeenEntry {
	return schemas.SeenEntry{
		Schema: schemas.SeenEntryV1, Kind: c.key.schemaKind(), Scope: scope, NotificationID: req.NotificationID, RequestID: req.RequestID,
		ContentHash: content, Outcome: outcomeOf(c.val, c.strs), FirstAt: c.val.firstAt, ExpiresAt: c.val.expiresAt,
		SourcePartition: c.val.partition, SourceOffset: c.val.offset,
	}
}

// entryV2 fills m with the herald.seen/v2 record of c (fx's change); m's
// bytes point into c and fx until m is marshalled.
func (c *change) entryV2(m *seenpb.SeenEntry, fx *effects) {
	*m = seenpb.SeenEntry{Kind: c.key.protoKind(), Scope: c.key.id[:], NotificationId: c.val.notification[:],
		Outcome: outcomeOf(c.val, c.strs), FirstAt: c.val.firstAt, ExpiresAt: c.val.expiresAt,
		SourcePartition: c.val.partition, SourceOffset: c.val.offset}
	if c.strs.request != "" {
		m.RequestIdText = c.strs.request
	} else {
		m.RequestId = c.val.request[:]
	}
	if fx.hasSum {
		m.ContentHash = fx.sum[:]
	}
}

// acceptedOf is the herald.accepted record of an accepted request, whose
// occurrence id is identity.OccurrenceID(req.NotificationID, at).
// AcceptedOf is the notification the stage emits for the route stage when
// it accepts req at record time at: what explain hands the route stage's
// decision function.
func AcceptedOf(req schemas.Request, at int64) schemas.Accepted {
	return acceptedOf(&req, at, identity.OccurrenceID(req.NotificationID, at))
}

func acceptedOf(req *schemas.Request, at int64, occurrence string) schemas.Accepted {
	return schemas.Accepted{
		Schema: schemas.AcceptedV1, NotificationID: req.NotificationID, OccurrenceID: occurrence,
		RequestID: req.RequestID, Tenant: req.Tenant, Type: req.Type,
		Recipient: req.Recipient, Title: req.Title, Body: req.Body, Payload: req.Payload, Locale: req.Locale,
		Channels: req.Channels, TargetDevice: req.TargetDevice, DedupeKey: req.DedupeKey, IdempotencyKey: req.IdempotencyKey, Producer: req.Producer,
		RequestedAt: req.CreatedAt, AcceptedAt: at,
	}
}

// canonicalIDPrefix scopes a request without a dedupeKey whose id is the
// canonical id of (type, recipient, key): its dedupe scope is the DedupeID
// of this prefix and the id, as the canonical id has no tenant in it.
const canonicalIDPrefix = "herald:id:"

// decide is Decide over a seenStore, into e. Each id is derived once.
func (p Policy) decide(req *schemas.Request, at int64, src Source, st seenStore, e *effects) {
	*e = effects{}
	d := &e.decision
	*d = schemas.Decision{
		Schema:          schemas.DecisionV1,
		DecisionID:      st.decisionID(src),
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
	var ids derived
	if msg := invalid(req, &ids); msg != "" {
		d.Outcome, d.Detail = schemas.DecisionRejected, msg
		return
	}
	repeat := func(v seenVal, s seenStrings) {
		if s.request != "" {
			d.OriginalRequestID = s.request
		} else {
			d.OriginalRequestID = st.hexString(v.request)
		}
		if s.notification != "" {
			d.OriginalNotificationID = s.notification
		} else {
			d.OriginalNotificationID = st.hexString(v.notification)
		}
		d.OriginalAt = v.firstAt
		d.OriginalOutcome = outcomeOf(v, s)
	}

	var idemKey seenKey
	if req.IdempotencyKey != "" {
		idemKey = seenKey{id: ids.idem, kind: kindIdem}
		e.sum, e.hasSum = req.ContentSum(), true
		if v, s, ok := st.get(idemKey); ok && at < v.expiresAt {
			if v.partition == src.Partition && v.offset == src.Offset {
				e.applied = true
				return
			}
			repeat(v, s)
			if sameContent(v, &e.sum) {
				d.Outcome = schemas.DecisionIdempotentReplay
			} else {
				d.Outcome = schemas.DecisionIdempotencyConflict
				d.Detail = "idempotency key reused with a different body"
			}
			return
		}
	}

	var dedupeKey seenKey
	if req.DedupeKey != "" {
		dedupeKey = seenKey{id: ids.dedupe, kind: kindDedupe}
	} else if req.IDSource == "key" {
		dedupeKey = seenKey{id: identity.DedupeSum(req.Tenant, req.Type, req.Recipient, canonicalIDPrefix, req.NotificationID), kind: kindDedupe}
	}
	if dedupeKey.kind != 0 {
		if v, s, ok := st.get(dedupeKey); ok && at < v.expiresAt {
			if v.partition == src.Partition && v.offset == src.Offset {
				e.applied = true
				return
			}
			repeat(v, s)
			d.Outcome = schemas.DecisionDuplicate
			if idemKey.kind != 0 {
				// A replay of this idempotency key must answer what this
				// request got: duplicate.
				e.add(req, &ids, idemKey, at, at+p.ttl(req), outcomeDuplicate, src)
			}
			return
		}
	}

	d.Outcome = schemas.DecisionAccepted
	e.accepted = true
	if dedupeKey.kind != 0 {
		e.add(req, &ids, dedupeKey, at, at+p.window(req), outcomeAccepted, src)
	}
	if idemKey.kind != 0 {
		e.add(req, &ids, idemKey, at, at+p.ttl(req), outcomeAccepted, src)
	}
}

// add notes one seen-set entry made by req.
func (e *effects) add(req *schemas.Request, ids *derived, k seenKey, at, expires int64, outcome uint8, src Source) {
	c := &e.changes[e.n]
	e.n++
	*c = change{key: k, val: seenVal{notification: ids.notification, firstAt: at, expiresAt: expires,
		offset: src.Offset, partition: src.Partition, outcome: outcome}}
	var ok bool
	if c.val.request, ok = identity.ParseID(req.RequestID); !ok {
		c.strs.request = strings.Clone(req.RequestID)
		c.val.flags |= flagStrings
	}
	if e.hasSum {
		copy(c.val.content[:], e.sum[:])
		c.val.flags |= flagContent
	}
}

// derived holds the ids of a valid request, each derived once.
type derived struct {
	notification, dedupe, idem [16]byte
}

func (p Policy) window(req *schemas.Request) int64 {
	if req.DedupeWindowMs > 0 {
		return req.DedupeWindowMs
	}
	if w, ok := p.TypeWindowMs[req.Type]; ok && w > 0 {
		return w
	}
	return p.DefaultWindowMs
}

func (p Policy) ttl(req *schemas.Request) int64 {
	if req.IdempotencyTTLMs > 0 {
		return req.IdempotencyTTLMs
	}
	return p.IdempotencyTTLMs
}

// invalid names what makes a request undecidable, or returns "". For a
// valid request it fills ids: the notification id's bytes, and the dedupe
// and idempotency ids of the keys the request carries.
func invalid(r *schemas.Request, ids *derived) string {
	if r.Tenant == "" {
		return "tenant is empty"
	}
	if r.Type == "" {
		return "type is empty"
	}
	if r.Recipient == "" {
		return "recipient is empty"
	}
	var ok bool
	if ids.notification, ok = identity.ParseID(r.NotificationID); !ok {
		return "notificationId is not 32 lower-case hex characters"
	}
	if r.DedupeKey != "" || r.IDSource == "dedupe_key" {
		ids.dedupe = identity.DedupeSum(r.Tenant, r.Type, r.Recipient, r.DedupeKey)
	}
	if r.IdempotencyKey != "" || r.IDSource == "idempotency_key" {
		ids.idem = identity.IdempotencySum(r.Tenant, r.Type, r.Recipient, r.IdempotencyKey)
	}
	if r.IDSource == "dedupe_key" && ids.notification != ids.dedupe {
		return "notificationId is not the id of its dedupeKey"
	}
	if r.IDSource == "idempotency_key" && (r.DedupeKey != "" || ids.notification != ids.idem) {
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
