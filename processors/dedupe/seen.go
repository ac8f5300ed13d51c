package dedupe

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/schemas/seenpb"
)

// The seen-set in memory. herald.seen holds seen entries (herald.seen/v2,
// Protocol Buffers, or JSON from earlier versions) under keys "idem/<id>" and "dedupe/<id>"; in memory a key is its
// kind and the 16 bytes its id spells (seenKey), and an entry the fixed,
// pointer-free seenVal (packed further in the committed tables, see
// seentable.go), so the garbage collector never scans the seen-set and a
// lookup allocates nothing. The few fields that have no fixed form
// (a request id that is not a herald id, an outcome other than accepted or
// duplicate) are kept as strings beside it (seenStrings), flagged in
// seenVal. A content hash that is not a sha256 in lower-case hex is not
// kept: no request's hash can equal it, so the entry answers a conflict
// either way.

// seenKind is a seen-set kind in memory.
type seenKind uint8

const (
	kindIdem   seenKind = 1
	kindDedupe seenKind = 2
)

// seenKey is a seen-set key in memory: kind and scope id.
type seenKey struct {
	id   [16]byte
	kind seenKind
}

// outcome codes of seenVal.
const (
	outcomeAccepted uint8 = iota
	outcomeDuplicate
	outcomeOther // in seenStrings
)

// seenVal flags.
const (
	// flagContent: content holds the first 16 bytes of the content hash.
	flagContent uint8 = 1 << iota
	// flagStrings: some field is in seenStrings (see strs).
	flagStrings
	// flagPerKey: the entry's record on herald.seen is a record of its own
	// key (the per-key layout, herald.seen/v1 and v2), which a tombstone of
	// that key must delete once the entry expires or is replaced (see
	// batch.go); without it the entry is in a bucket record.
	flagPerKey
)

// seenVal is one seen-set entry in memory, without pointers.
type seenVal struct {
	notification [16]byte
	request      [16]byte
	// content is the first half of the sha256 of the request's content:
	// two contents are told apart unless their hashes agree on 128 bits.
	content            [16]byte
	firstAt, expiresAt int64
	offset             int64
	partition          int32
	outcome            uint8
	flags              uint8
}

// seenStrings holds the fields of an entry that seenVal cannot; a field
// left empty here is in seenVal.
type seenStrings struct {
	notification, request, outcome string
}

func (k seenKey) schemaKind() schemas.SeenKind {
	if k.kind == kindIdem {
		return schemas.SeenIdempotency
	}
	return schemas.SeenDedupe
}

func (k seenKey) protoKind() seenpb.Kind {
	if k.kind == kindIdem {
		return seenpb.Kind_KIND_IDEMPOTENCY
	}
	return seenpb.Kind_KIND_DEDUPE
}

// appendKey appends the key's herald.seen form, "idem/<id>" or
// "dedupe/<id>".
func (k seenKey) appendKey(b []byte) []byte {
	b = append(b, k.schemaKind()...)
	b = append(b, '/')
	return hex.AppendEncode(b, k.id[:])
}

// parseSeenKey reads a herald.seen key; ok is false for any other form.
func parseSeenKey(key []byte) (k seenKey, ok bool) {
	kind, id, found := bytes.Cut(key, []byte("/"))
	if !found {
		return k, false
	}
	if string(kind) == string(schemas.SeenIdempotency) {
		k.kind = kindIdem
	} else if string(kind) == string(schemas.SeenDedupe) {
		k.kind = kindDedupe
	} else {
		return k, false
	}
	if len(id) != 32 {
		return k, false
	}
	// No allocation: 32 bytes converted for a call that does not keep them
	// fit the compiler's stack buffer (the whole key would not).
	k.id, ok = identity.ParseID(string(id))
	return k, ok
}

// outcomeCode is the code of a decision outcome stored in an entry.
func outcomeCode(outcome string) uint8 {
	if outcome == schemas.DecisionAccepted {
		return outcomeAccepted
	}
	if outcome == schemas.DecisionDuplicate {
		return outcomeDuplicate
	}
	return outcomeOther
}

// valOf converts a decoded herald.seen entry to its memory form.
func valOf(e *schemas.SeenEntry) (v seenVal, s seenStrings) {
	v = seenVal{firstAt: e.FirstAt, expiresAt: e.ExpiresAt, offset: e.SourceOffset, partition: e.SourcePartition,
		outcome: outcomeCode(e.Outcome)}
	var ok bool
	if v.notification, ok = identity.ParseID(e.NotificationID); !ok {
		s.notification = strings.Clone(e.NotificationID)
	}
	if v.request, ok = identity.ParseID(e.RequestID); !ok {
		s.request = strings.Clone(e.RequestID)
	}
	if v.outcome == outcomeOther {
		s.outcome = strings.Clone(e.Outcome)
	}
	if sum, ok := parseSum(e.ContentHash); ok {
		copy(v.content[:], sum[:])
		v.flags |= flagContent
	}
	return flagged(v, s)
}

// valOfV2 converts a herald.seen/v2 entry that schemas.CheckSeenV2
// accepted to its memory form.
func valOfV2(m *seenpb.SeenEntry) (v seenVal, s seenStrings) {
	v = seenVal{notification: [16]byte(m.NotificationId), firstAt: m.FirstAt, expiresAt: m.ExpiresAt,
		offset: m.SourceOffset, partition: m.SourcePartition, outcome: outcomeCode(m.Outcome)}
	if len(m.RequestId) == len(v.request) {
		v.request = [16]byte(m.RequestId)
	} else {
		s.request = strings.Clone(m.RequestIdText)
	}
	if v.outcome == outcomeOther {
		s.outcome = strings.Clone(m.Outcome)
	}
	if len(m.ContentHash) == sha256.Size {
		copy(v.content[:], m.ContentHash)
		v.flags |= flagContent
	}
	return flagged(v, s)
}

// flagged is v with flagStrings set when s holds a field.
func flagged(v seenVal, s seenStrings) (seenVal, seenStrings) {
	if s != (seenStrings{}) {
		v.flags |= flagStrings
	}
	return v, s
}

// parseSum reads a sha256 in lower-case hex.
func parseSum(h string) (sum [sha256.Size]byte, ok bool) {
	if len(h) != 64 {
		return sum, false
	}
	lo, ok1 := identity.ParseID(h[:32])
	hi, ok2 := identity.ParseID(h[32:])
	copy(sum[:16], lo[:])
	copy(sum[16:], hi[:])
	return sum, ok1 && ok2
}

// sameContent reports whether an entry records the content whose sha256
// is sum.
func sameContent(v seenVal, sum *[sha256.Size]byte) bool {
	return v.flags&flagContent != 0 && [16]byte(sum[:16]) == v.content
}

// outcomeOf is the outcome an entry records.
func outcomeOf(v seenVal, s seenStrings) string {
	switch v.outcome {
	case outcomeAccepted:
		return schemas.DecisionAccepted
	case outcomeDuplicate:
		return schemas.DecisionDuplicate
	}
	return s.outcome
}
