package schemas

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
	"sync"
)

// Request is one producer call for one recipient, on herald.requests, keyed
// by NotificationID. The HTTP API and the Go SDK write it; the dedupe stage
// reads it.
//
//easyjson:json
type Request struct {
	Schema string `json:"schema,nocopy"`
	// RequestID is unique per producer call (a UUIDv7 hex); it names this
	// call, not the notification.
	RequestID      string `json:"requestId,nocopy" jsonschema:"minLength=1"`
	Tenant         string `json:"tenant,nocopy" jsonschema:"minLength=1"`
	Type           string `json:"type,nocopy" jsonschema:"minLength=1"`
	Recipient      string `json:"recipient,nocopy" jsonschema:"minLength=1"`
	NotificationID string `json:"notificationId,nocopy" jsonschema:"pattern=^[0-9a-f]{32}$"`
	// IDSource says how NotificationID was derived: "key" (canonical id of
	// type, recipient and key), "dedupe_key", "idempotency_key" or "random".
	IDSource         string          `json:"idSource,nocopy" jsonschema:"enum=key,enum=dedupe_key,enum=idempotency_key,enum=random"`
	Key              json.RawMessage `json:"key,omitempty"`
	DedupeKey        string          `json:"dedupeKey,omitempty,nocopy"`
	DedupeWindowMs   int64           `json:"dedupeWindowMs,omitempty" jsonschema:"minimum=0"`
	IdempotencyKey   string          `json:"idempotencyKey,omitempty,nocopy"`
	IdempotencyTTLMs int64           `json:"idempotencyTtlMs,omitempty" jsonschema:"minimum=0"`
	Title            string          `json:"title,nocopy"`
	Body             string          `json:"body,nocopy"`
	Payload          json.RawMessage `json:"payload,omitempty"`
	Locale           string          `json:"locale,omitempty,nocopy"`
	Channels         []string        `json:"channels,omitempty,nocopy"`
	// TargetDevice limits delivery to one of the recipient's devices (a
	// send to a device target); empty means all of them.
	TargetDevice string `json:"targetDevice,omitempty,nocopy"`
	// Producer names the calling service (the API key's name, or the SDK's
	// configured client id). Never a secret.
	Producer  string `json:"producer,omitempty,nocopy"`
	Source    string `json:"source,nocopy" jsonschema:"enum=api,enum=sdk"`
	CreatedAt int64  `json:"createdAt"`
}

// SchemaName implements Record.
func (Request) SchemaName() string { return RequestV1 }

// ContentHash is the sha256 (hex) of what the request asks to send: type,
// recipient, dedupe key, title, body, payload, locale and channels. Two
// requests with one idempotency key and different content hashes conflict.
// Producer, request id and times are not content. The payload is hashed in
// a canonical form (see compactJSON) that keeps every number's exact value.
//
// Upgrade. Seen-set entries store this hash. Versions before exact numbers
// hashed payload numbers as float64; a payload whose numbers a float64
// holds exactly (the usual case) hashes as it did then, so stored entries
// keep matching. A payload with a number a float64 cannot hold (an integer
// beyond 2^53 such as 9007199254740993, more significant digits than 17,
// beyond float64's range) now hashes differently: a retry of such a request
// decided before the upgrade, within its idempotency TTL, is answered as a
// conflict (422, nothing sent) instead of a replay. `herald replay`, which
// hashes with the new code throughout, reports as differences both those
// conflicts and the decisions the old hash got wrong (such a number changed
// in a retry, answered as a replay).
func (r Request) ContentHash() string {
	sum := r.ContentSum()
	return hex.EncodeToString(sum[:])
}

// ContentSum is the sha256 that ContentHash writes in hex. A request
// whose strings hold no \b or \f (the usual request) is hashed from its
// generated encoding (see requestContent), without allocating unless its
// payload holds a string or number in an unusual form (see
// appendCanonical); any other one through encoding/json, as before (see
// longFormOfShortEscape).
func (r *Request) ContentSum() [sha256.Size]byte {
	c := requestContent{r.Type, r.Recipient, r.DedupeKey, r.Title, r.Body, jsonNull, r.Locale, r.Channels, r.TargetDevice}
	s := contentScratch.Get().(*scratch)
	defer contentScratch.Put(s)
	if len(r.Payload) != 0 {
		// The canonical payload is what encoding/json writes for it as it
		// is, and the generated encoder copies it unchanged.
		s.payload, s.members = appendCompactJSON(s.payload[:0], r.Payload, s.members)
		c.Payload = s.payload
	}
	s.e.start(s.buf[:0])
	c.MarshalEasyJSON(&s.e.w)
	b, _ := s.e.finish(s.buf[:0]) // cannot fail: strings and slices only
	s.buf = b[:0]
	if longFormOfShortEscape(b) {
		b, _ = json.Marshal(c) // only strings, slices and valid raw JSON: cannot fail
	}
	return sha256.Sum256(b)
}

// contentScratch holds the buffers ContentSum encodes into: the content,
// the canonical payload, and the room for the payload's objects' members.
var contentScratch = sync.Pool{New: func() any { return &scratch{buf: make([]byte, 0, 1000)} }}

type scratch struct {
	e       Encoder
	buf     []byte
	payload []byte
	members []member
}

var jsonNull = json.RawMessage("null")

// requestContent is what ContentHash hashes, in this field order.
//
//easyjson:json
type requestContent struct {
	Type      string          `json:"type"`
	Recipient string          `json:"recipient"`
	DedupeKey string          `json:"dedupeKey"`
	Title     string          `json:"title"`
	Body      string          `json:"body"`
	Payload   json.RawMessage `json:"payload"`
	Locale    string          `json:"locale"`
	Channels  []string        `json:"channels"`
	Device    string          `json:"targetDevice,omitempty"`
}

// longFormOfShortEscape reports whether b, the generated encoder's
// output, may differ from what encoding/json writes. The two differ only
// in how they escape \b and \f: encoding/json writes the short forms, the
// generated code \u0008 and \u000c, and nothing else writes those (the
// canonical payload is encoding/json's own form). So an output without
// them is encoding/json's, byte for byte. One holding their text for
// another reason (a string holding a backslash and "u0008") is encoded
// again by encoding/json: slower, and as correct.
func longFormOfShortEscape(b []byte) bool {
	return bytes.Contains(b, []byte(`\u0008`)) || bytes.Contains(b, []byte(`\u000c`))
}

// compactJSON returns the canonical form of a payload that ContentHash
// hashes, or JSON null when raw is empty or not valid JSON (which Encode
// would reject anyway). Object keys are sorted, insignificant white space
// and key order are not content, and strings are re-escaped as
// encoding/json escapes them. Numbers keep their value exactly (see
// canonicalNumber): decoding them into float64 would make
// 9007199254740993 and 9007199254740992 one number.
//
// It is the text encoding/json writes for raw decoded into any with
// json.Number, each number replaced by canonicalNumber's text; it is
// written without the decoding (appendCanonical).
func compactJSON(raw json.RawMessage) json.RawMessage {
	b, _ := appendCompactJSON(make([]byte, 0, len(raw)), raw, nil)
	return b
}

// appendCompactJSON appends compactJSON(raw) to dst, with members as
// appendCanonical's room (returned for the next call).
func appendCompactJSON(dst []byte, raw json.RawMessage, members []member) ([]byte, []member) {
	if len(raw) == 0 || !json.Valid(raw) {
		return append(dst, "null"...), members
	}
	return appendCanonical(dst, raw, members)
}

// canonicalNumber returns one text per numeric value of a JSON number
// (1, 1.0 and 1e0 are one value; 9007199254740993 and 9007199254740992 are
// two). A number whose value is exactly the shortest decimal of its float64
// (every number a float64 holds without loss, as producers almost always
// send: 0.1, 42, 1e+23) keeps the text encoding/json gives that float64,
// so its hash is the one herald computed before numbers were kept exact. Any
// other number (more digits than a float64 holds, or out of its range) is
// written exactly: its significant digits, then "e" and the exponent when
// it is not an integer of at most 64 digits.
func canonicalNumber(text string) json.Number {
	neg, digits, exp := decimalOf(text)
	if f, err := strconv.ParseFloat(text, 64); err == nil {
		if fneg, fdigits, fexp := decimalOf(strconv.FormatFloat(f, 'e', -1, 64)); digits == "" ||
			(fneg == neg && fdigits == digits && fexp.Cmp(exp) == 0) {
			b, err := json.Marshal(f)
			if err == nil {
				return json.Number(b)
			}
		}
	}
	var sb strings.Builder
	if neg {
		sb.WriteByte('-')
	}
	sb.WriteString(digits)
	if exp.Sign() >= 0 && exp.IsInt64() && int64(len(digits))+exp.Int64() <= 64 {
		sb.WriteString(strings.Repeat("0", int(exp.Int64())))
	} else {
		sb.WriteByte('e')
		sb.WriteString(exp.String())
	}
	return json.Number(sb.String())
}

// decimalOf reads a valid JSON number as sign, significant digits (no
// leading or trailing zeros; empty for zero) and exponent: the value is
// digits × 10^exp. The exponent is a big.Int, as JSON allows any.
func decimalOf(text string) (neg bool, digits string, exp *big.Int) {
	if strings.HasPrefix(text, "-") {
		neg, text = true, text[1:]
	}
	mant, e, _ := strings.Cut(strings.ToLower(text), "e")
	exp = new(big.Int)
	if e != "" {
		exp.SetString(strings.TrimPrefix(e, "+"), 10) // valid JSON: cannot fail
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	all := strings.TrimLeft(intPart+frac, "0")
	exp.Sub(exp, big.NewInt(int64(len(frac))))
	trimmed := strings.TrimRight(all, "0")
	exp.Add(exp, big.NewInt(int64(len(all)-len(trimmed))))
	if trimmed == "" {
		return neg, "", new(big.Int)
	}
	return neg, trimmed, exp
}

// Outcome of a decision.
const (
	DecisionAccepted            = "accepted"
	DecisionDuplicate           = "duplicate"
	DecisionIdempotentReplay    = "idempotent_replay"
	DecisionIdempotencyConflict = "idempotency_conflict"
	DecisionRateLimited         = "rate_limited"
	DecisionDigested            = "digested"
	DecisionOptedOut            = "opted_out"
	DecisionDeferred            = "deferred"
	// DecisionRouted: the route stage emitted the notification's delivery
	// commands now (and its feed item).
	DecisionRouted = "routed"
	// DecisionNoTarget: no enabled device on any push channel asked for;
	// Detail says whether the type's fallback channel was used.
	DecisionNoTarget = "no_target"
	// DecisionRejected marks a request the stage could not read (bad
	// schema, missing fields); Detail says why. Nothing is sent.
	DecisionRejected = "rejected"
	// DecisionFallback (stage fallback): a step of a type's fallback chain
	// fired, its deliveries emitted; Detail names the step and the reason.
	DecisionFallback = "fallback"
	// DecisionFallbackCancelled (stage fallback): a step of a fallback
	// chain will never fire (a receipt, a delivery of the step before, an
	// earlier step cancelled, the entry expired); Detail names the step and
	// the reason.
	DecisionFallbackCancelled = "fallback_cancelled"
	// DecisionRedriven (stage deadletters) records an operator's redrive of
	// a dead letter (herald deadletters redrive): Producer names who,
	// Detail why and which dead letter, RequestID the redrive.
	DecisionRedriven = "redriven"
)

// Decision is what a stage decided about one request, on herald.decisions,
// keyed by notification id. Every request gets exactly one dedupe decision.
//
//easyjson:json
type Decision struct {
	Schema string `json:"schema,nocopy"`
	// DecisionID is unique per decision: stage, source partition and offset.
	DecisionID string `json:"decisionId,nocopy"`
	Stage      string `json:"stage,nocopy" jsonschema:"enum=dedupe,enum=route,enum=sink,enum=deadletters,enum=fallback"`
	Outcome    string `json:"outcome,nocopy" jsonschema:"enum=accepted,enum=duplicate,enum=idempotent_replay,enum=idempotency_conflict,enum=rate_limited,enum=digested,enum=opted_out,enum=deferred,enum=routed,enum=no_target,enum=rejected,enum=redriven,enum=fallback,enum=fallback_cancelled"`
	// Detail explains a rejection or a conflict in words.
	Detail         string `json:"detail,omitempty,nocopy"`
	RequestID      string `json:"requestId,nocopy"`
	Tenant         string `json:"tenant,nocopy"`
	Type           string `json:"type,nocopy"`
	Recipient      string `json:"recipient,nocopy"`
	NotificationID string `json:"notificationId,nocopy"`
	// OccurrenceID is the accepted record's (see Accepted), on the route
	// stage's decisions; empty on the dedupe stage's and for a
	// notification accepted before occurrences existed.
	OccurrenceID   string `json:"occurrenceId,omitempty,nocopy"`
	DedupeKey      string `json:"dedupeKey,omitempty,nocopy"`
	IdempotencyKey string `json:"idempotencyKey,omitempty,nocopy"`
	Producer       string `json:"producer,omitempty,nocopy"`
	Channel        string `json:"channel,omitempty,nocopy"`
	// The original request this one repeats (duplicate, replay, conflict).
	OriginalRequestID      string `json:"originalRequestId,omitempty,nocopy"`
	OriginalNotificationID string `json:"originalNotificationId,omitempty,nocopy"`
	OriginalAt             int64  `json:"originalAt,omitempty"`
	// OriginalOutcome is the original's decision, returned on a replay.
	OriginalOutcome string `json:"originalOutcome,omitempty,nocopy"`
	// Deliveries are the pushes and the feed item a route decision made
	// (routed, deferred, no_target with a fallback), for callers waiting
	// for it (Prefer: wait).
	Deliveries []DecisionDelivery `json:"deliveries,omitempty"`
	// At is the record time of the request the decision is about.
	At              int64  `json:"at"`
	SourceTopic     string `json:"sourceTopic,nocopy"`
	SourcePartition int32  `json:"sourcePartition"`
	SourceOffset    int64  `json:"sourceOffset"`
}

// SchemaName implements Record.
func (Decision) SchemaName() string { return DecisionV1 }

// Delivery states in a route decision.
const (
	DeliveryQueued   = "queued"
	DeliveryDeferred = "deferred"
	// DeliveryFallback: a later step of the type's fallback chain, sent
	// only if the step's condition holds (processors/fallback).
	DeliveryFallback = "fallback"
)

// DecisionDelivery is one delivery command a route decision emitted (or
// deferred).
type DecisionDelivery struct {
	DeliveryID string `json:"deliveryId,nocopy"`
	Channel    string `json:"channel,nocopy"`
	DeviceID   string `json:"deviceId,nocopy"`
	State      string `json:"state,nocopy" jsonschema:"enum=queued,enum=deferred,enum=fallback"`
	// NotBefore is when a deferred delivery goes (ms).
	NotBefore int64 `json:"notBefore,omitempty"`
}

// SeenKind names the two seen-sets of the dedupe stage.
type SeenKind string

// Seen-set kinds.
const (
	SeenIdempotency SeenKind = "idem"
	SeenDedupe      SeenKind = "dedupe"
)

// SeenEntry is one live key of the dedupe stage's seen-set, on the compacted
// topic herald.seen, keyed by SeenKey(Kind, Scope). A tombstone removes it
// once ExpiresAt has passed.
//
//easyjson:json
type SeenEntry struct {
	Schema string   `json:"schema,nocopy"`
	Kind   SeenKind `json:"kind,nocopy" jsonschema:"enum=idem,enum=dedupe"`
	// Scope is the derived scope id (identity.IdempotencyID or identity.DedupeID).
	Scope          string `json:"scope,nocopy"`
	NotificationID string `json:"notificationId,nocopy"`
	RequestID      string `json:"requestId,nocopy"`
	// ContentHash is the Request.ContentHash of the request that created
	// the entry when that request carried an idempotency key (the only
	// case where it is compared); empty otherwise.
	ContentHash string `json:"contentHash,omitempty,nocopy"`
	// Outcome is the decision the first request got, replayed to repeats.
	Outcome   string `json:"outcome,nocopy"`
	FirstAt   int64  `json:"firstAt"`
	ExpiresAt int64  `json:"expiresAt"`
	// SourcePartition and SourceOffset locate the request that created the
	// entry, so the same request processed again after a failure is
	// recognised as itself rather than as a repeat.
	SourcePartition int32 `json:"sourcePartition"`
	SourceOffset    int64 `json:"sourceOffset"`
}

// SchemaName implements Record.
func (SeenEntry) SchemaName() string { return SeenEntryV1 }

// Accepted is a notification the dedupe stage accepted, on herald.accepted,
// keyed by RecipientKey(Tenant, Recipient) for the route stage.
//
//easyjson:json
type Accepted struct {
	Schema         string `json:"schema"`
	NotificationID string `json:"notificationId"`
	// OccurrenceID names this acceptance of the notification
	// (identity.OccurrenceID of the id and AcceptedAt): delivery ids derive
	// from it, so a key accepted again after its dedupe window is sent
	// again. Empty in records written before occurrences existed, whose
	// deliveries derive from NotificationID.
	OccurrenceID   string          `json:"occurrenceId,omitempty"`
	RequestID      string          `json:"requestId"`
	Tenant         string          `json:"tenant"`
	Type           string          `json:"type"`
	Recipient      string          `json:"recipient"`
	Title          string          `json:"title"`
	Body           string          `json:"body"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Locale         string          `json:"locale,omitempty"`
	Channels       []string        `json:"channels,omitempty"`
	TargetDevice   string          `json:"targetDevice,omitempty"`
	DedupeKey      string          `json:"dedupeKey,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	Producer       string          `json:"producer,omitempty"`
	RequestedAt    int64           `json:"requestedAt"`
	AcceptedAt     int64           `json:"acceptedAt"`
}

// SchemaName implements Record.
func (Accepted) SchemaName() string { return AcceptedV1 }

// Occurrence is the id a record's deliveries and events derive from: its
// occurrenceID, or its notificationID when it was written before
// occurrences existed (occurrenceID empty). Every record that carries
// both (Accepted, DeliveryCommand, Decision, Outcome, Completion) and the
// receipts the web client sends are read this way.
func Occurrence(notificationID, occurrenceID string) string {
	if occurrenceID != "" {
		return occurrenceID
	}
	return notificationID
}

// WebPushSubscription is a browser's PushSubscription.
type WebPushSubscription struct {
	Endpoint string `json:"endpoint" jsonschema:"format=uri"`
	P256dh   string `json:"p256dh"`
	Auth     string `json:"auth"`
}

// DeliveryCommand asks a sink to send one push to one device, on
// herald.deliveries.<channel>, keyed by delivery id.
type DeliveryCommand struct {
	Schema         string `json:"schema"`
	DeliveryID     string `json:"deliveryId"`
	NotificationID string `json:"notificationId"`
	// OccurrenceID is the accepted record's (see Accepted); empty for a
	// notification accepted before occurrences existed. Devices drop a
	// repeat by it, and show the newest occurrence in place of an older
	// one by NotificationID (collapse ids, tag).
	OccurrenceID string               `json:"occurrenceId,omitempty"`
	Tenant       string               `json:"tenant"`
	Type         string               `json:"type"`
	Recipient    string               `json:"recipient"`
	DeviceID     string               `json:"deviceId"`
	Channel      string               `json:"channel" jsonschema:"enum=apns,enum=fcm,enum=webpush,enum=feed,enum=webhook,enum=email"`
	Token        string               `json:"token,omitempty"`
	WebPush      *WebPushSubscription `json:"webPush,omitempty"`
	CollapseID   string               `json:"collapseId"`
	APNsID       string               `json:"apnsId,omitempty"`
	Topic        string               `json:"topic,omitempty"`
	Title        string               `json:"title"`
	Body         string               `json:"body"`
	Payload      json.RawMessage      `json:"payload,omitempty"`
	Locale       string               `json:"locale,omitempty"`
	CreatedAt    int64                `json:"createdAt"`
	// NotBefore defers the send (quiet hours); 0 means now.
	NotBefore int64 `json:"notBefore,omitempty"`
	// ExpiresAt (ms) is when the push stops being worth sending: the sink
	// gives up retrying then (outcome expired) and APNs gets it as
	// apns-expiration. 0: the sink's default maximum age after CreatedAt.
	ExpiresAt int64 `json:"expiresAt,omitempty"`
}

// SchemaName implements Record.
func (DeliveryCommand) SchemaName() string { return DeliveryCommandV1 }

// Attempt results.
const (
	AttemptSent      = "sent"
	AttemptRetryable = "retryable"
	AttemptPermanent = "permanent"
	AttemptAmbiguous = "ambiguous"
)

// Attempt is one call to a provider, on herald.attempts, keyed by delivery id.
type Attempt struct {
	Schema            string `json:"schema"`
	AttemptID         string `json:"attemptId"`
	DeliveryID        string `json:"deliveryId"`
	NotificationID    string `json:"notificationId"`
	Tenant            string `json:"tenant"`
	Type              string `json:"type"`
	Recipient         string `json:"recipient"`
	DeviceID          string `json:"deviceId"`
	Channel           string `json:"channel"`
	Attempt           int    `json:"attempt" jsonschema:"minimum=1"`
	Result            string `json:"result" jsonschema:"enum=sent,enum=retryable,enum=permanent,enum=ambiguous"`
	Classification    string `json:"classification,omitempty"`
	ProviderStatus    int    `json:"providerStatus,omitempty"`
	ProviderReason    string `json:"providerReason,omitempty"`
	ProviderMessageID string `json:"providerMessageId,omitempty"`
	CollapseID        string `json:"collapseId,omitempty"`
	APNsID            string `json:"apnsId,omitempty"`
	Locale            string `json:"locale,omitempty"`
	LatencyMs         int64  `json:"latencyMs"`
	RetryAfterMs      int64  `json:"retryAfterMs,omitempty"`
	At                int64  `json:"at"`
}

// SchemaName implements Record.
func (Attempt) SchemaName() string { return AttemptV1 }

// Outcome statuses.
const (
	OutcomeDelivered     = "delivered"
	OutcomeDeadLettered  = "dead_lettered"
	OutcomeDeviceRetired = "device_retired"
	// OutcomeFailed: a permanent provider error, or retries exhausted; the
	// command is also on herald.deadletters.
	OutcomeFailed = "failed"
	// OutcomeExpired: the notification expired before a send succeeded.
	OutcomeExpired = "expired"
)

// Outcome is the final state of one delivery, on herald.outcomes, keyed by
// delivery id.
type Outcome struct {
	Schema         string `json:"schema"`
	DeliveryID     string `json:"deliveryId"`
	NotificationID string `json:"notificationId"`
	// OccurrenceID is the delivery command's (see DeliveryCommand).
	OccurrenceID string `json:"occurrenceId,omitempty"`
	Tenant       string `json:"tenant"`
	Type         string `json:"type"`
	Recipient    string `json:"recipient"`
	DeviceID     string `json:"deviceId"`
	Channel      string `json:"channel"`
	Status       string `json:"status" jsonschema:"enum=delivered,enum=dead_lettered,enum=device_retired,enum=failed,enum=expired"`
	Reason       string `json:"reason,omitempty"`
	Attempts     int    `json:"attempts"`
	At           int64  `json:"at"`
}

// SchemaName implements Record.
func (Outcome) SchemaName() string { return OutcomeV1 }

// Device is one registered device of a user, on the compacted topic
// herald.devices, keyed by DeviceKey. A tombstone deletes it. A device of
// platform email is a registered address: Token holds the address.
type Device struct {
	Schema    string               `json:"schema"`
	Tenant    string               `json:"tenant"`
	Recipient string               `json:"recipient"`
	DeviceID  string               `json:"deviceId"`
	Platform  string               `json:"platform" jsonschema:"enum=ios,enum=android,enum=web,enum=email"`
	Token     string               `json:"token,omitempty"`
	WebPush   *WebPushSubscription `json:"webPush,omitempty"`
	Locale    string               `json:"locale,omitempty"`
	TimeZone  string               `json:"timeZone,omitempty"`
	Enabled   bool                 `json:"enabled"`
	// Tags label the device for target kind tag (e.g. "beta", "vip"); a
	// send to a tag reaches every user with an enabled device carrying it.
	Tags []string `json:"tags,omitempty"`
	// RetiredReason is set when a provider invalidated the token.
	RetiredReason string `json:"retiredReason,omitempty"`
	// ReceiptTokenSHA256 is the hex SHA-256 of the device's receipt token
	// (POST /v1/receipts): the API issues a fresh token at each
	// registration, answers it once and keeps only this hash. A sink that
	// retires the device keeps it (receipts of earlier pushes still count).
	// Empty: the device cannot send receipts (not a web device, or
	// registered before receipts existed).
	ReceiptTokenSHA256 string `json:"receiptTokenSha256,omitempty"`
	CreatedAt          int64  `json:"createdAt"`
	UpdatedAt          int64  `json:"updatedAt"`
}

// SchemaName implements Record.
func (Device) SchemaName() string { return DeviceV1 }

// QuietHours defers push channels between Start and End ("HH:MM", local to
// TimeZone, an IANA name); End before Start spans midnight.
type QuietHours struct {
	Start    string `json:"start" jsonschema:"pattern=^([01][0-9]|2[0-3]):[0-5][0-9]$"`
	End      string `json:"end" jsonschema:"pattern=^([01][0-9]|2[0-3]):[0-5][0-9]$"`
	TimeZone string `json:"timeZone"`
}

// Preferences are one user's channel choices, on the compacted topic
// herald.preferences, keyed by RecipientKey.
type Preferences struct {
	Schema    string `json:"schema"`
	Tenant    string `json:"tenant"`
	Recipient string `json:"recipient"`
	// Channels maps a channel to whether the user accepts it; a channel not
	// listed is accepted.
	Channels map[string]bool `json:"channels,omitempty"`
	// OptedOutTypes lists notification types the user never wants.
	OptedOutTypes []string    `json:"optedOutTypes,omitempty"`
	QuietHours    *QuietHours `json:"quietHours,omitempty"`
	UpdatedAt     int64       `json:"updatedAt"`
}

// SchemaName implements Record.
func (Preferences) SchemaName() string { return PreferencesV1 }

// Segment is a tenant-defined named set of users (target kind segment), on
// the compacted topic herald.segments, keyed by RecipientKey(Tenant, Name).
// A put replaces the members; a tombstone deletes the segment.
type Segment struct {
	Schema  string   `json:"schema"`
	Tenant  string   `json:"tenant"`
	Name    string   `json:"name"`
	Members []string `json:"members"`
	// UpdatedAt is when the members were last replaced (ms).
	UpdatedAt int64 `json:"updatedAt"`
}

// SchemaName implements Record.
func (Segment) SchemaName() string { return SegmentV1 }

// RouteKind names the three kinds of route-stage state.
type RouteKind string

// Route state kinds.
const (
	// RouteRate is a rate-limit counter of one recipient and type in one
	// fixed window.
	RouteRate RouteKind = "rate"
	// RouteDigest is an open digest buffer of one recipient and digest key.
	RouteDigest RouteKind = "digest"
	// RouteDeferred holds push deliveries deferred by quiet hours.
	RouteDeferred RouteKind = "deferred"
)

// DigestItem is one notification buffered in a digest.
type DigestItem struct {
	NotificationID string `json:"notificationId"`
	RequestID      string `json:"requestId"`
	Title          string `json:"title"`
	At             int64  `json:"at"`
}

// RouteEntry is one key of the route stage's state, on the compacted topic
// herald.route (a changelog co-partitioned with herald.accepted), keyed by
// kind/tenant/recipient/...; a tombstone removes it once DueAt has passed
// (rate counters) or its timer fired (digests, deferrals).
type RouteEntry struct {
	Schema    string    `json:"schema"`
	Kind      RouteKind `json:"kind" jsonschema:"enum=rate,enum=digest,enum=deferred"`
	Tenant    string    `json:"tenant"`
	Recipient string    `json:"recipient"`
	Type      string    `json:"type"`
	// DueAt is when the entry's timer fires (ms, record time): the end of
	// the rate window (the counter is then deleted), of the digest window
	// (the digest is sent) or of the quiet hours (the deferred deliveries
	// are released).
	DueAt int64 `json:"dueAt"`
	// WindowStart and Count: the rate window and how many notifications it
	// let through; for a digest, when its window opened.
	WindowStart int64 `json:"windowStart,omitempty"`
	Count       int   `json:"count,omitempty"`
	// DigestKey and Items: an open digest.
	DigestKey string       `json:"digestKey,omitempty"`
	Items     []DigestItem `json:"items,omitempty"`
	// NotificationID and Commands: the deferred deliveries of one
	// notification, released as they are at DueAt.
	NotificationID string            `json:"notificationId,omitempty"`
	Commands       []DeliveryCommand `json:"commands,omitempty"`
}

// SchemaName implements Record.
func (RouteEntry) SchemaName() string { return RouteEntryV1 }

// Sink entry states.
const (
	SinkPending = "pending"
	SinkParked  = "parked"
	SinkFinal   = "final"
)

// SinkEntry is one delivery's state in a sink, on the compacted topic
// herald.sinkstate.<channel>, keyed by delivery id and written to the
// partition of the delivery command (co-partitioned with
// herald.deliveries.<channel>). Final entries are the sent-set; a pending
// entry is the write-ahead intent of a provider call, committed before the
// call; a parked entry waits for NotBefore to be retried.
type SinkEntry struct {
	Schema     string `json:"schema"`
	DeliveryID string `json:"deliveryId"`
	Status     string `json:"status" jsonschema:"enum=pending,enum=parked,enum=final"`
	// Attempt is the number of the call in flight (pending), or of the
	// last call made (parked, final).
	Attempt   int   `json:"attempt"`
	NotBefore int64 `json:"notBefore,omitempty"`
	ExpiresAt int64 `json:"expiresAt,omitempty"`
	// Outcome is the final status (an Outcome status).
	Outcome string `json:"outcome,omitempty"`
	// Command is kept while the delivery is not final.
	Command *DeliveryCommand `json:"command,omitempty"`
	// AttemptBase is the number of attempts made before the delivery was
	// last redriven from a dead letter (0 if never): attempts go on
	// numbering from it, and the retry budget (the sink's MaxAttempts)
	// counts only those after it.
	AttemptBase int   `json:"attemptBase,omitempty"`
	UpdatedAt   int64 `json:"updatedAt"`
}

// SchemaName implements Record.
func (SinkEntry) SchemaName() string { return SinkEntryV1 }

// FeedItem is one notification in a recipient's in-app feed, on the
// compacted topic herald.feed keyed by FeedKey (tenant/recipient/
// notification id). The feed sink writes it once, in the transaction that
// consumes its delivery command; the API rewrites it with ReadAt when the
// recipient reads it.
type FeedItem struct {
	Schema         string          `json:"schema"`
	Tenant         string          `json:"tenant"`
	Recipient      string          `json:"recipient"`
	NotificationID string          `json:"notificationId"`
	Type           string          `json:"type"`
	Title          string          `json:"title"`
	Body           string          `json:"body"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	// CreatedAt is the notification's creation (ms): the feed's order.
	CreatedAt int64 `json:"createdAt"`
	// DeliveredAt is when the sink wrote the item, ReadAt when it was read
	// (0: unread).
	DeliveredAt int64 `json:"deliveredAt"`
	ReadAt      int64 `json:"readAt,omitempty"`
}

// SchemaName implements Record.
func (FeedItem) SchemaName() string { return FeedItemV1 }

// Receipt kinds: what a device reports about a notification.
const (
	// ReceiptDisplayed: the web client showed the notification.
	ReceiptDisplayed = "displayed"
	// ReceiptOpened: the user clicked it (notificationclick).
	ReceiptOpened = "opened"
	// ReceiptDropped: the web client's seen-set dropped a repeat of a
	// notification it had already shown (a client-side dedupe hit).
	ReceiptDropped = "dropped"
)

// Receipt is what a device reported about one notification (POST
// /v1/receipts, authenticated by the device's receipt token), on
// herald.receipts, keyed by delivery id. ReceiptID is
// identity.ReceiptID(DeliveryID, Kind): a receipt sent again carries the
// same id, and the audit counts receipts by it, so each kind counts at most
// once per delivery. Tenant, Recipient and DeviceID come from the token;
// NotificationID and Type are what the device reported.
type Receipt struct {
	Schema         string `json:"schema"`
	ReceiptID      string `json:"receiptId"`
	Kind           string `json:"kind" jsonschema:"enum=displayed,enum=opened,enum=dropped"`
	DeliveryID     string `json:"deliveryId"`
	NotificationID string `json:"notificationId"`
	Tenant         string `json:"tenant"`
	Type           string `json:"type,omitempty"`
	Recipient      string `json:"recipient"`
	DeviceID       string `json:"deviceId"`
	Channel        string `json:"channel" jsonschema:"enum=webpush"`
	// At is when herald received the receipt (ms); ClientAt the device's
	// clock when it happened, as reported (0: not reported).
	At       int64 `json:"at"`
	ClientAt int64 `json:"clientAt,omitempty"`
}

// SchemaName implements Record.
func (Receipt) SchemaName() string { return ReceiptV1 }

// Webhook events a tenant's endpoint subscribes to (Webhook.Events). The
// delivery and device events are built from one Outcome on
// herald.outcomes, send.completed from every final state of a
// notification's deliveries (sinks/webhook).
const (
	// EventDeliveryCompleted: a delivery reached its final state, whatever
	// it is (delivered, failed, expired, device_retired).
	EventDeliveryCompleted = "delivery.completed"
	// EventDeliveryFailed: a delivery ended failed (permanent error or
	// retries exhausted, dead-lettered) or expired.
	EventDeliveryFailed = "delivery.failed"
	// EventDeviceRetired: a provider invalidated a device's token and
	// herald disabled the device.
	EventDeviceRetired = "device.retired"
	// EventSendCompleted: every delivery of a notification reached its
	// final state (or the route stage made none): one event per
	// notification, with the per-channel summary.
	EventSendCompleted = "send.completed"
)

// WebhookEvents lists every event type, sorted.
var WebhookEvents = []string{EventDeliveryCompleted, EventDeliveryFailed, EventDeviceRetired, EventSendCompleted}

// Completion is the webhook completion stage's state of one notification
// (one occurrence of it) whose send.completed event is not written yet, on
// the compacted topic herald.completionstate, keyed by occurrence id (the
// notification id before occurrences existed) and written to the
// partition of herald.completions the notification's records are read
// from. A tombstone when the event is written (or the entry expires).
type Completion struct {
	Schema         string `json:"schema"`
	NotificationID string `json:"notificationId"`
	// OccurrenceID is the occurrence the entry is about (its key; see
	// Accepted): empty for a notification accepted before occurrences
	// existed, whose key is the notification id.
	OccurrenceID string `json:"occurrenceId,omitempty"`
	Tenant       string `json:"tenant"`
	Type         string `json:"type"`
	Recipient    string `json:"recipient"`
	// Decision is the route stage's notification-level decision (routed,
	// deferred, no_target, opted_out, rate_limited, digested, rejected);
	// empty while it has not been read (outcomes can come first).
	Decision string `json:"decision,omitempty"`
	Detail   string `json:"detail,omitempty"`
	// DecidedAt is the decision's time (ms).
	DecidedAt int64 `json:"decidedAt,omitempty"`
	// Skipped are the channels the recipient opted out of that had a
	// target (the route stage's per-channel opted_out decisions).
	Skipped []string `json:"skipped,omitempty"`
	// Deliveries: the decision's, and any whose outcome came first.
	Deliveries []CompletionDelivery `json:"deliveries,omitempty"`
	// FirstAt is when the stage first read a record of the notification
	// (ms, its record time): an entry open too long after it expires.
	FirstAt int64 `json:"firstAt"`
}

// SchemaName implements Record.
func (Completion) SchemaName() string { return CompletionV1 }

// CompletionDelivery is one delivery of a notification in its Completion.
type CompletionDelivery struct {
	DeliveryID string `json:"deliveryId"`
	Channel    string `json:"channel"`
	DeviceID   string `json:"deviceId"`
	// Planned: the route decision lists it.
	Planned bool `json:"planned,omitempty"`
	// Status is its Outcome status; empty while it is open.
	Status   string `json:"status,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	At       int64  `json:"at,omitempty"`
}

// Fallback step states (FallbackStep.State).
const (
	FallbackPending   = ""
	FallbackFired     = "fired"
	FallbackCancelled = "cancelled"
)

// Fallback is one notification's fallback chain (processors/fallback).
// The route stage writes the plan (Steps, with the commands of every step
// after the first) to herald.fallback, keyed by notification id, in the
// transaction of its decision; the fallback stage keeps it, with the
// outcomes and receipts of its deliveries, on the compacted changelog
// herald.fallbackstate under the same key, written to the partition of
// herald.fallback it is read from.
type Fallback struct {
	Schema         string `json:"schema"`
	NotificationID string `json:"notificationId"`
	// OccurrenceID is the route decision's (see Accepted); empty while the
	// plan has not been read.
	OccurrenceID string `json:"occurrenceId,omitempty"`
	Tenant       string `json:"tenant"`
	Type         string `json:"type"`
	Recipient    string `json:"recipient"`
	// RequestID is the request the notification came from.
	RequestID string `json:"requestId,omitempty"`
	// Chain is the type's chain as configured (route.Chain's text).
	Chain string `json:"chain,omitempty"`
	// PlannedAt is the route decision's time (ms): step 1 fired then. 0:
	// the plan has not been read (outcomes and receipts can come first).
	PlannedAt int64          `json:"plannedAt,omitempty"`
	Steps     []FallbackStep `json:"steps,omitempty"`
	// Outcomes and Receipts are the facts read so far.
	Outcomes []FallbackOutcome `json:"outcomes,omitempty"`
	Receipts []FallbackReceipt `json:"receipts,omitempty"`
	// Done: every step fired or cancelled; the entry stays, so a late
	// record changes nothing, until it expires.
	Done bool `json:"done,omitempty"`
	// FirstAt is the record time of the first record read of it (ms).
	FirstAt int64 `json:"firstAt"`
}

// SchemaName implements Record.
func (Fallback) SchemaName() string { return FallbackV1 }

// FallbackStep is one step of a fallback chain.
type FallbackStep struct {
	Channels []string `json:"channels"`
	// AfterMs: the step waits this long after the step before fired.
	AfterMs int64 `json:"afterMs,omitempty"`
	// Unless: receipt kinds that cancel the step.
	Unless []string `json:"unless,omitempty"`
	// IfFailed: the step fires only once every delivery of the step
	// before ended without being delivered.
	IfFailed bool `json:"ifFailed,omitempty"`
	// Deliveries are the step's delivery ids (the first step's are the
	// route decision's on its channels).
	Deliveries []string `json:"deliveries,omitempty"`
	// Commands are what the step sends when it fires (none for the first
	// step, which the route stage sent).
	Commands []DeliveryCommand `json:"commands,omitempty"`
	// State is FallbackPending, FallbackFired or FallbackCancelled; At
	// when it changed (ms) and Reason why.
	State  string `json:"state,omitempty"`
	At     int64  `json:"at,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// FallbackOutcome is a delivery's final state as a fallback chain reads it.
type FallbackOutcome struct {
	DeliveryID string `json:"deliveryId"`
	Status     string `json:"status"`
	Reason     string `json:"reason,omitempty"`
	At         int64  `json:"at"`
}

// FallbackReceipt is a receipt as a fallback chain reads it.
type FallbackReceipt struct {
	DeliveryID string `json:"deliveryId"`
	Kind       string `json:"kind"`
	At         int64  `json:"at"`
}

// Fallback watermark kinds (FallbackMark.Kind): the forwarder that made
// the mark, named by the topic it reads.
const (
	MarkOutcomes = "outcomes"
	MarkReceipts = "receipts"
)

// FallbackWatermark is how far the fallback stage's forwarders have read
// their topics (processors/fallback, "Watermarks"). A forwarder writes one
// to every partition of herald.fallback, keyed "watermark/<kind>/<partition>",
// one mark each, in the transaction of its offsets; the fallback stage
// keeps every mark it read on herald.fallbackstate under the key
// "watermarks", all of them in one record.
type FallbackWatermark struct {
	Schema string         `json:"schema"`
	Marks  []FallbackMark `json:"marks"`
}

// SchemaName implements Record.
func (FallbackWatermark) SchemaName() string { return FallbackWatermarkV1 }

// FallbackMark says: every record committed to partition Partition of the
// forwarder's topic (Kind: MarkOutcomes or MarkReceipts) before At (ms, the
// forwarder's clock) precedes the mark on the partition of herald.fallback
// it is read from.
type FallbackMark struct {
	Kind      string `json:"kind" jsonschema:"enum=outcomes,enum=receipts"`
	Partition int32  `json:"partition"`
	// Partitions is the topic's partition count when the mark was made.
	Partitions int32 `json:"partitions"`
	At         int64 `json:"at"`
}

// Webhook is one endpoint a tenant registered for outbound webhooks, on the
// compacted topic herald.webhooks, keyed by RecipientKey(Tenant, ID). A
// tombstone deletes it.
type Webhook struct {
	Schema string `json:"schema"`
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	URL    string `json:"url" jsonschema:"format=uri"`
	// Secret signs every delivery (Standard Webhooks symmetric scheme):
	// "whsec_" and the base64 of 24 to 64 random bytes. Never logged.
	Secret string `json:"secret"`
	// Events are the event types the endpoint receives.
	Events  []string `json:"events"`
	Enabled bool     `json:"enabled"`
	// DisabledReason is set when herald disabled the endpoint (it answered
	// 410 Gone).
	DisabledReason string `json:"disabledReason,omitempty"`
	CreatedAt      int64  `json:"createdAt"`
	UpdatedAt      int64  `json:"updatedAt"`
}

// SchemaName implements Record.
func (Webhook) SchemaName() string { return WebhookV1 }

// All returns one zero value of every record type, for generators and tests.
func All() []Record {
	return []Record{Request{}, Decision{}, SeenEntry{}, Accepted{}, DeliveryCommand{}, Attempt{}, Outcome{}, Device{}, Preferences{}, Segment{}, RouteEntry{}, SinkEntry{}, FeedItem{}, Receipt{}, Webhook{}, Completion{}, Fallback{}, FallbackWatermark{}}
}
