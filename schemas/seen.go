package schemas

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas/seenpb"
)

// SeenEntryV2 names the binary seen-set entry: Protocol Buffers, schema
// schemas/seenpb/seen.proto (message herald.seen.v2.SeenEntry). It has the
// fields of SeenEntry (herald.seen/v1, JSON), with ids as their 16 bytes
// instead of 32 hex characters. The dedupe stage writes it by default;
// Decode and Decoder read a SeenEntry of either version (see "Seen
// entries" in the package doc).
const SeenEntryV2 = "herald.seen/v2"

// ErrSeenV2 is wrapped by the errors of a herald.seen/v2 value that decodes
// but breaks the schema's rules (a field of the wrong length, an unknown
// kind).
var ErrSeenV2 = errors.New("schemas: invalid herald.seen/v2 entry")

// decodeSeenV2 reads a herald.seen/v2 value into e, with Schema set to
// SeenEntryV2 and ids in hex. e's strings do not point into b.
func decodeSeenV2(b []byte, e *SeenEntry) error {
	var m seenpb.SeenEntry
	if err := m.UnmarshalVT(b); err != nil {
		return fmt.Errorf("schemas: decode %s: %w", SeenEntryV2, err)
	}
	if err := CheckSeenV2(&m); err != nil {
		return err
	}
	*e = SeenEntry{Schema: SeenEntryV2, Kind: SeenIdempotency, Scope: hex.EncodeToString(m.Scope),
		NotificationID: hex.EncodeToString(m.NotificationId), RequestID: m.RequestIdText,
		ContentHash: hex.EncodeToString(m.ContentHash), Outcome: m.Outcome, FirstAt: m.FirstAt, ExpiresAt: m.ExpiresAt,
		SourcePartition: m.SourcePartition, SourceOffset: m.SourceOffset}
	if m.Kind == seenpb.Kind_KIND_DEDUPE {
		e.Kind = SeenDedupe
	}
	if len(m.RequestId) > 0 {
		e.RequestID = hex.EncodeToString(m.RequestId)
	}
	return nil
}

// CheckSeenV2 reports whether a decoded herald.seen/v2 message keeps the
// schema's rules: a known kind; scope and notification id of 16 bytes;
// the request id as 16 bytes or as text, one of them; a content hash of
// 32 bytes or none.
func CheckSeenV2(m *seenpb.SeenEntry) error {
	// One if a rule, not a tagless switch: the mutation tool sees the
	// conditions of a switch's cases as never run.
	if m.Kind != seenpb.Kind_KIND_IDEMPOTENCY && m.Kind != seenpb.Kind_KIND_DEDUPE {
		return fmt.Errorf("%w: kind %d", ErrSeenV2, m.Kind)
	}
	if len(m.Scope) != idBytes {
		return fmt.Errorf("%w: scope has %d bytes, want %d", ErrSeenV2, len(m.Scope), idBytes)
	}
	if len(m.NotificationId) != idBytes {
		return fmt.Errorf("%w: notification_id has %d bytes, want %d", ErrSeenV2, len(m.NotificationId), idBytes)
	}
	if len(m.RequestId) != idBytes && !(len(m.RequestId) == 0 && m.RequestIdText != "") {
		return fmt.Errorf("%w: request_id has %d bytes and request_id_text %d: want %d bytes or text", ErrSeenV2, len(m.RequestId), len(m.RequestIdText), idBytes)
	}
	if len(m.RequestId) == idBytes && m.RequestIdText != "" {
		return fmt.Errorf("%w: both request_id and request_id_text are set", ErrSeenV2)
	}
	if len(m.ContentHash) != 0 && len(m.ContentHash) != contentHashBytes {
		return fmt.Errorf("%w: content_hash has %d bytes, want %d or none", ErrSeenV2, len(m.ContentHash), contentHashBytes)
	}
	return nil
}

const (
	idBytes          = identity.IDLen / 2
	contentHashBytes = 32
)

// AppendSeenV2 appends e encoded as herald.seen/v2. Its scope and
// notification id must be herald ids (32 lower-case hex characters), its
// content hash a sha256 in lower-case hex or empty; a request id that is
// not a herald id is kept as text.
func AppendSeenV2(dst []byte, e *SeenEntry) ([]byte, error) {
	var m seenpb.SeenEntry
	switch e.Kind {
	case SeenIdempotency:
		m.Kind = seenpb.Kind_KIND_IDEMPOTENCY
	case SeenDedupe:
		m.Kind = seenpb.Kind_KIND_DEDUPE
	default:
		return nil, fmt.Errorf("schemas: encode %s: kind %q", SeenEntryV2, e.Kind)
	}
	scope, ok := identity.ParseID(e.Scope)
	if !ok {
		return nil, fmt.Errorf("schemas: encode %s: scope %q is not a herald id", SeenEntryV2, e.Scope)
	}
	notification, ok := identity.ParseID(e.NotificationID)
	if !ok {
		return nil, fmt.Errorf("schemas: encode %s: notificationId %q is not a herald id", SeenEntryV2, e.NotificationID)
	}
	m.Scope, m.NotificationId = scope[:], notification[:]
	if request, ok := identity.ParseID(e.RequestID); ok {
		m.RequestId = request[:]
	} else {
		m.RequestIdText = e.RequestID
	}
	if e.ContentHash != "" {
		sum, err := hex.DecodeString(e.ContentHash)
		if err != nil || len(sum) != contentHashBytes || hex.EncodeToString(sum) != e.ContentHash {
			return nil, fmt.Errorf("schemas: encode %s: contentHash %q is not a sha256 in lower-case hex", SeenEntryV2, e.ContentHash)
		}
		m.ContentHash = sum
	}
	m.Outcome, m.FirstAt, m.ExpiresAt = e.Outcome, e.FirstAt, e.ExpiresAt
	m.SourcePartition, m.SourceOffset = e.SourcePartition, e.SourceOffset
	if err := CheckSeenV2(&m); err != nil {
		return nil, err
	}
	return AppendSeenProto(dst, &m), nil
}

// AppendSeenProto appends m marshalled, with no allocation when dst has
// room. It does not check m (see CheckSeenV2).
func AppendSeenProto(dst []byte, m *seenpb.SeenEntry) []byte {
	n := m.SizeVT()
	dst = slices.Grow(dst, n)
	// A buffer of exactly SizeVT bytes is all MarshalToSizedBufferVT needs:
	// it has no other error.
	_, _ = m.MarshalToSizedBufferVT(dst[len(dst) : len(dst)+n])
	return dst[:len(dst)+n]
}
