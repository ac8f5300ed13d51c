package sdk

import (
	"github.com/heraldhq/herald/identity"
)

// Key is what distinguishes one notification from another of the same type
// to the same recipient, e.g. {"invoice": "inv_2201"}: identity.Key.
type Key = identity.Key

// String and Number build Key values (identity.String, identity.Number).
var (
	String = identity.String
	Number = identity.Number
)

// ID sources: how a send's notification id was derived (the idSource field
// of herald.request/v1).
const (
	SourceDedupeKey      = "dedupe_key"
	SourceIdempotencyKey = "idempotency_key"
	SourceKey            = "key"
	SourceRandom         = "random"
)

// NotificationID returns the canonical notification id of (typ, recipient,
// key): identity.NotificationID, byte-compatible with the reference
// JavaScript function. It does not depend on the tenant.
func NotificationID(typ, recipient string, key Key) (string, error) {
	return identity.NotificationID(typ, recipient, key)
}

// DeriveID returns the notification id herald gives one recipient's copy of
// a send, and how it was derived, by this rule:
//
//   - with a dedupeKey: identity.DedupeID(tenant, typ, recipient, dedupeKey)
//     (also when an idempotencyKey is given, so an exact retry meets its
//     original in one partition);
//   - else with an idempotencyKey: identity.IdempotencyID(tenant, typ,
//     recipient, idempotencyKey);
//   - else with a key (non-nil; the empty key counts): NotificationID(typ,
//     recipient, key);
//   - else a fresh random id (identity.NewRandomID): herald cannot tell a
//     retry of such a send from a second send on purpose.
func DeriveID(tenant, typ, recipient string, key Key, dedupeKey, idempotencyKey string) (id, source string, err error) {
	var keyJSON []byte
	if key != nil && dedupeKey == "" && idempotencyKey == "" {
		if keyJSON, err = key.MarshalJSON(); err != nil {
			return "", "", err
		}
	}
	return deriveID(tenant, typ, recipient, keyJSON, dedupeKey, idempotencyKey)
}

// deriveID is DeriveID with the key as its canonical text (nil: no key),
// so that Requests canonicalizes a key once for all its recipients.
func deriveID(tenant, typ, recipient string, keyJSON []byte, dedupeKey, idempotencyKey string) (id, source string, err error) {
	switch {
	case dedupeKey != "":
		return identity.DedupeID(tenant, typ, recipient, dedupeKey), SourceDedupeKey, nil
	case idempotencyKey != "":
		return identity.IdempotencyID(tenant, typ, recipient, idempotencyKey), SourceIdempotencyKey, nil
	case keyJSON != nil:
		id, err := identity.NotificationIDOfCanonicalKey(typ, recipient, keyJSON)
		if err != nil {
			return "", "", err
		}
		return id, SourceKey, nil
	}
	return identity.NewRandomID(), SourceRandom, nil
}
