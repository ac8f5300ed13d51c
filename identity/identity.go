// Package identity owns herald's ids: the notification id, the ids derived
// from a caller's dedupe or idempotency key, delivery ids, and the collapse
// ids herald hands to push providers. It is importable by the Go SDK and has
// no dependencies beyond the standard library and github.com/google/uuid.
//
// # The identity model
//
// A notification id is a function of what the notification is, never of when
// it was sent: the same (type, recipient, key) always gives the same id, so a
// retry, a replay or a second producer racing the first all meet in the same
// Kafka partition and the dedupe stage keeps one of them. Nothing
// time-dependent (a timestamp, a random nonce, a sequence number) may enter it.
//
// All ids are 32 lower-case hexadecimal characters (128 bits); [Valid] checks
// that form.
//
// # Notification id
//
// [NotificationID] is byte-compatible with this JavaScript function, the
// reference:
//
//	function notificationId(type, recipient, key) {
//	  const sortedKey = {};
//	  for (const k of Object.keys(key).sort()) sortedKey[k] = key[k];
//	  const json = JSON.stringify({t: type, r: recipient, k: sortedKey});
//	  return crypto.createHash('sha256').update(json).digest('hex').slice(0, 32);
//	}
//
// i.e. the first 16 bytes of SHA-256 over the UTF-8 bytes of a JSON text
// (see [CanonicalJSON]) of the form
//
//	{"t":<type>,"r":<recipient>,"k":{<name>:<value>,...}}
//
// with no whitespace, where:
//
//   - Key members are ordered the way a JavaScript object orders them: first
//     the names that are array indices (the canonical decimal form of an
//     integer 0 ≤ n ≤ 4294967294: "0", "7", "10", but not "01", "-1" or
//     "4294967295") in ascending numeric order, then every other name in
//     UTF-16 code unit order (Array.prototype.sort's default order, which is
//     not Go's byte order: U+FF5E sorts after U+1F600).
//   - Strings are escaped as ES2019 JSON.stringify does: \" and \\, the short
//     forms \b \f \n \r \t, every other code unit below U+0020 and every lone
//     surrogate as \u00xx / \udxxx with lower-case hex. Nothing else is
//     escaped: not '<', '>', '&', U+007F, U+2028, U+2029 nor any non-ASCII
//     character (unlike Go's encoding/json).
//   - Numbers are formatted by ECMAScript Number::toString: the shortest
//     digits that round-trip, plain notation from 1e-6 up to below 1e21
//     ("0.000001", "100000000000000000000"), exponent notation outside it
//     ("1e-7", "1.5e+21"); -0 is "0"; NaN and ±Infinity are null.
//
// # Go strings and JavaScript strings
//
// JavaScript strings are sequences of UTF-16 code units; Go strings are
// bytes. identity reads every Go string (type, recipient, key names and
// values) as UTF-8 extended to allow encoded surrogate code points (the
// three-byte forms ED A0 80 … ED BF BF, as in WTF-8), converts it to UTF-16
// code units, and pairs adjacent high and low surrogates as JavaScript would.
// That way every JavaScript string, including one holding a lone surrogate,
// has a Go spelling, and [ParseKey] produces it from "\ud800"-style escapes.
// Any other invalid byte sequence is rejected with an error wrapping
// [ErrInvalidString]: herald refuses to guess rather than derive an id that
// no JavaScript caller could reproduce.
//
// Two further refusals keep Go from ever disagreeing with the reference:
// a key named "__proto__" (the reference's sortedKey[k] = … assignment hits
// Object.prototype's __proto__ setter and silently drops that member, so the
// key {"__proto__": "x"} would collide with {}) and a zero [Value].
//
// # Derived ids
//
// [DedupeID], [IdempotencyID] and [DeliveryID] are the first 16 bytes of
// SHA-256 over a length-prefixed encoding, in lower-case hex:
//
//	hex(sha256(enc(tag) || enc(field1) || enc(field2) || ...)[:16])
//	enc(s) = uint64 big-endian byte length of s || the bytes of s
//
// with these tags and fields (strings as their bytes; from other languages,
// their UTF-8 encoding):
//
//	DedupeID       "herald/dedupe/v1"       tenant, type, recipient, dedupeKey
//	IdempotencyID  "herald/idempotency/v1"  tenant, type, recipient, idempotencyKey
//	DeliveryID     "herald/delivery/v1"     notificationID, deviceID
//
// The tag separates the domains from each other, and the leading zero byte
// of the length prefix separates them all from notification ids, whose
// preimage starts with '{'.
//
// [NewRandomID] is a fresh UUIDv7 as 32 hex characters, for a call that has
// neither a key nor a dedupe or idempotency key: herald cannot tell a retry
// of such a call from a second send on purpose.
//
// # Provider ids
//
// All provider-facing ids come from the notification id, so provider logs
// join ours:
//
//	APNsID          UUIDv5(NameSpaceURL, "herald:notification:" + id), dashed lower case
//	APNsCollapseID  the id itself (32 bytes; APNs allows 64)
//	FCMCollapseKey  the id itself
//	WebPushTopic    base64url, unpadded, of the 16 bytes the id encodes (22 characters; the limit is 32)
package identity

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
)

// IDLen is the length of every herald id: 32 lower-case hex characters.
const IDLen = 32

// Domain-separation tags of the derived ids. Changing one changes every id
// derived with it: bump the version instead.
const (
	tagDedupe      = "herald/dedupe/v1"
	tagIdempotency = "herald/idempotency/v1"
	tagDelivery    = "herald/delivery/v1"
	tagReceipt     = "herald/receipt/v1"
	tagWebhook     = "herald/webhook-event/v1"
	tagOccurrence  = "herald/occurrence/v1"
)

// apnsNamePrefix is prepended to the notification id to form the UUIDv5 name
// of the apns-id (in uuid.NameSpaceURL).
const apnsNamePrefix = "herald:notification:"

// ErrInvalidString is wrapped by the errors for strings that are not UTF-8
// (extended to encoded surrogates; see the package documentation).
var ErrInvalidString = errors.New("not valid UTF-8")

// ErrInvalidID is wrapped by the errors for an id that is not 32 lower-case
// hex characters.
var ErrInvalidID = errors.New("not a herald id (want 32 lower-case hex characters)")

// NotificationID returns the notification id of (typ, recipient, key): the
// first 16 bytes of SHA-256 over [CanonicalJSON], in lower-case hex. It fails
// only for strings that are not UTF-8, a key named "__proto__", or a zero
// [Value] (see the package documentation).
func NotificationID(typ, recipient string, key Key) (string, error) {
	b, err := CanonicalJSON(typ, recipient, key)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// NotificationIDOfCanonicalKey is [NotificationID] with the key given as
// its canonical text, what key.MarshalJSON returned: a caller deriving the
// ids of one key for many recipients canonicalizes the key once. Any other
// text gives an id that is not the key's.
func NotificationIDOfCanonicalKey(typ, recipient string, canonicalKey []byte) (string, error) {
	b, err := appendCanonicalHead(make([]byte, 0, 64+len(typ)+len(recipient)+len(canonicalKey)), typ, recipient)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(append(b, canonicalKey...), '}'))
	return hex.EncodeToString(sum[:16]), nil
}

// NotificationIDFromJSON is [NotificationID] with the key given as a JSON
// object, parsed by [ParseKey].
func NotificationIDFromJSON(typ, recipient, keyJSON string) (string, error) {
	key, err := ParseKey(keyJSON)
	if err != nil {
		return "", err
	}
	return NotificationID(typ, recipient, key)
}

// DedupeID returns the notification id of a call that carries a dedupeKey:
// hex(sha256(enc("herald/dedupe/v1") || enc(tenant) || enc(typ) ||
// enc(recipient) || enc(dedupeKey))[:16]), enc(s) being s's byte length as
// a big-endian uint64 followed by its bytes.
func DedupeID(tenant, typ, recipient, dedupeKey string) string {
	return derive(tagDedupe, tenant, typ, recipient, dedupeKey)
}

// DedupeSum is [DedupeID] as the 16 bytes its hex spells, computed without
// allocating when the preimage fits 256 bytes. The dedupe key is the
// concatenation of keyParts, so a caller that builds one from pieces need
// not join them first.
func DedupeSum(tenant, typ, recipient string, keyParts ...string) [IDLen / 2]byte {
	return deriveSum(tagDedupe, tenant, typ, recipient, keyParts)
}

// IdempotencySum is [IdempotencyID] as the 16 bytes its hex spells, computed
// without allocating when the preimage fits 256 bytes.
func IdempotencySum(tenant, typ, recipient, idempotencyKey string) [IDLen / 2]byte {
	return deriveSum(tagIdempotency, tenant, typ, recipient, []string{idempotencyKey})
}

// ParseID returns the 16 bytes a valid id spells, and whether id is valid
// (see [Valid]). It does not allocate, and reads id in one pass without a
// branch per character: an id's digits are random, so a branch on each
// would be mispredicted about every third character.
func ParseID(id string) (sum [IDLen / 2]byte, ok bool) {
	if len(id) != IDLen {
		return sum, false
	}
	var bad byte
	for i := range sum {
		// A byte that is not a digit is 0 in the table, so 0xff here:
		// above 0xf, it marks the id bad.
		hi, lo := hexDigit[id[2*i]]-1, hexDigit[id[2*i+1]]-1
		bad |= hi | lo
		sum[i] = hi<<4 | lo
	}
	if bad > 0xf {
		return [IDLen / 2]byte{}, false
	}
	return sum, true
}

// hexDigit is one more than the value of each lower-case hex digit, and 0
// for every other byte.
var hexDigit = [256]byte{
	'0': 1, '1': 2, '2': 3, '3': 4, '4': 5, '5': 6, '6': 7, '7': 8, '8': 9, '9': 10,
	'a': 11, 'b': 12, 'c': 13, 'd': 14, 'e': 15, 'f': 16,
}

// IdempotencyID returns the notification id of a call that carries only an
// idempotencyKey: like [DedupeID] with the tag "herald/idempotency/v1".
func IdempotencyID(tenant, typ, recipient, idempotencyKey string) string {
	return derive(tagIdempotency, tenant, typ, recipient, idempotencyKey)
}

// OccurrenceID returns the id of one acceptance of a notification:
// hex(sha256(enc("herald/occurrence/v1") || enc(notificationID) ||
// enc(decimal acceptedAt))[:16]), with enc as in [DedupeID] and acceptedAt
// the Unix milliseconds of the request the dedupe stage accepted (its
// record's timestamp, so a replay of the log derives the same id).
//
// A notification id names what a notification is, never when: once a
// key's dedupe window has passed, the same key is accepted again as a new
// notification with the same notification id. Its occurrence id differs,
// and delivery ids, apns-ids and the web client's seen-set use it, so the
// second acceptance is sent and shown; collapse ids, the Web Push Topic
// and the notification's tag keep the notification id, so the device
// shows the newer occurrence in place of the older one.
func OccurrenceID(notificationID string, acceptedAt int64) string {
	var id [IDLen]byte
	return string(AppendOccurrenceID(id[:0], notificationID, acceptedAt))
}

// AppendOccurrenceID appends [OccurrenceID](notificationID, acceptedAt) to
// dst: the dedupe stage writes it into its own buffers, without
// allocating.
func AppendOccurrenceID(dst []byte, notificationID string, acceptedAt int64) []byte {
	var digits [20]byte
	return appendDerived(dst, tagOccurrence, notificationID, string(strconv.AppendInt(digits[:0], acceptedAt, 10)))
}

// DeliveryID returns the id of one push of a notification to one device:
// hex(sha256(enc("herald/delivery/v1") || enc(occurrenceID) ||
// enc(deviceID))[:16]), with enc as in [DedupeID]. The route stage gives it
// the notification's [OccurrenceID]; a notification accepted before
// occurrences existed (its accepted record has none) uses its
// notification id, as it always did.
func DeliveryID(occurrenceID, deviceID string) string {
	return derive(tagDelivery, occurrenceID, deviceID)
}

// ReceiptID returns the id of one receipt of a kind ("displayed",
// "opened", "dropped") about one delivery: hex(sha256(enc("herald/receipt/v1")
// || enc(deliveryID) || enc(kind))[:16]), with enc as in [DedupeID]. A
// receipt the web client sends again (a retried POST /v1/receipts) has the
// same id, so the audit counts it once.
func ReceiptID(deliveryID, kind string) string {
	return derive(tagReceipt, deliveryID, kind)
}

// WebhookEventID is the id of the outbound webhook event of one type about
// one delivery's outcome (subjectID the delivery id), or, for
// send.completed, about one notification (subjectID the notification id):
// the same for every endpoint it goes to and every retry (Standard
// Webhooks' webhook-id is "msg_" and this id), so receivers dedupe on it.
// Its delivery to one endpoint is DeliveryID(WebhookEventID(...),
// endpointID).
func WebhookEventID(subjectID, eventType string) string {
	return derive(tagWebhook, subjectID, eventType)
}

// NewRandomID returns a fresh UUIDv7 as 32 lower-case hex characters, the id
// of a call with neither a dedupe nor an idempotency key.
func NewRandomID() string {
	u := uuid.Must(uuid.NewV7())
	return hex.EncodeToString(u[:])
}

// Valid reports whether id is 32 lower-case hex characters, the form of every
// herald id.
func Valid(id string) bool {
	_, ok := ParseID(id)
	return ok
}

// APNsID returns the apns-id header for a notification: the UUIDv5 of the
// name "herald:notification:" + notificationID in the URL namespace
// (6ba7b811-9dad-11d1-80b4-00c04fd430c8), in dashed lower-case form.
func APNsID(notificationID string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte(apnsNamePrefix+notificationID)).String()
}

// APNsCollapseID returns the apns-collapse-id header for a notification: the
// id itself (32 bytes; APNs allows up to 64).
func APNsCollapseID(notificationID string) (string, error) {
	if err := check(notificationID); err != nil {
		return "", fmt.Errorf("identity: apns-collapse-id: %w", err)
	}
	return notificationID, nil
}

// FCMCollapseKey returns the FCM android.collapse_key for a notification: the
// id itself.
func FCMCollapseKey(notificationID string) (string, error) {
	if err := check(notificationID); err != nil {
		return "", fmt.Errorf("identity: fcm collapse_key: %w", err)
	}
	return notificationID, nil
}

// WebPushTopic returns the Web Push Topic header for a notification: the 16
// bytes the id encodes in unpadded base64url, 22 characters (the header
// allows 32).
func WebPushTopic(notificationID string) (string, error) {
	if err := check(notificationID); err != nil {
		return "", fmt.Errorf("identity: web push topic: %w", err)
	}
	var raw [IDLen / 2]byte
	if _, err := hex.Decode(raw[:], []byte(notificationID)); err != nil {
		return "", fmt.Errorf("identity: web push topic: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(raw[:]), nil
}

func check(id string) error {
	if !Valid(id) {
		return fmt.Errorf("%q: %w", id, ErrInvalidID)
	}
	return nil
}

func derive(tag string, fields ...string) string {
	var id [IDLen]byte
	return string(appendDerived(id[:0], tag, fields...))
}

// appendDerived appends derive(tag, fields...) to dst.
func appendDerived(dst []byte, tag string, fields ...string) []byte {
	var stack [256]byte // the preimage of most ids fits: no allocation
	b := appendField(stack[:0], tag)
	for _, f := range fields {
		b = appendField(b, f)
	}
	sum := sha256.Sum256(b)
	return hex.AppendEncode(dst, sum[:16])
}

// deriveSum is derive's sum for three fields and a fourth one given as
// the concatenation of its parts.
func deriveSum(tag, f1, f2, f3 string, f4 []string) (id [IDLen / 2]byte) {
	var stack [256]byte // the preimage of most ids fits: no allocation
	b := appendField(stack[:0], tag)
	b = appendField(b, f1)
	b = appendField(b, f2)
	b = appendField(b, f3)
	n := 0
	for _, p := range f4 {
		n += len(p)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(n))
	for _, p := range f4 {
		b = append(b, p...)
	}
	sum := sha256.Sum256(b)
	copy(id[:], sum[:16])
	return id
}

// appendField appends enc(s): the length of s as a big-endian uint64, then s.
func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}
