package schemas_test

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/schemas/seenpb"
)

// seenV2 is a herald.seen entry that has a herald.seen/v2 form.
func seenV2() schemas.SeenEntry {
	return schemas.SeenEntry{Kind: schemas.SeenIdempotency, Scope: "0123456789abcdef0123456789abcdef",
		NotificationID: "fedcba9876543210fedcba9876543210", RequestID: "00112233445566778899aabbccddeeff",
		ContentHash: strings.Repeat("0f", 32), Outcome: schemas.DecisionAccepted,
		FirstAt: 1_764_500_000_000, ExpiresAt: 1_764_500_060_000, SourcePartition: 11, SourceOffset: 1 << 40}
}

func TestSeenEntriesRoundTripThroughHeraldSeenV2(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*schemas.SeenEntry)
	}{
		{"an idempotency entry with its content hash", func(*schemas.SeenEntry) {}},
		{"a dedupe entry without a content hash", func(e *schemas.SeenEntry) { e.Kind, e.ContentHash = schemas.SeenDedupe, "" }},
		{"a request id that is not a herald id is kept as text", func(e *schemas.SeenEntry) { e.RequestID = "call #1, ünïcødé" }},
		{"an upper-case request id is kept as text", func(e *schemas.SeenEntry) { e.RequestID = strings.ToUpper(e.RequestID) }},
		{"a duplicate outcome and zero times", func(e *schemas.SeenEntry) {
			e.Outcome, e.FirstAt, e.ExpiresAt, e.SourcePartition, e.SourceOffset = schemas.DecisionDuplicate, 0, 0, 0, 0
		}},
		{"negative times", func(e *schemas.SeenEntry) { e.FirstAt, e.ExpiresAt = -5, -1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := seenV2()
			c.mod(&want)
			b, err := schemas.AppendSeenV2([]byte("prefix"), &want)
			if err != nil {
				t.Fatal(err)
			}
			if string(b[:6]) != "prefix" {
				t.Fatalf("AppendSeenV2 overwrote what it appends to: %q", b[:6])
			}
			b = b[6:]
			if schemas.IsJSON(b) {
				t.Fatalf("a herald.seen/v2 value reads as JSON: % x", b)
			}
			want.Schema = schemas.SeenEntryV2
			var d schemas.Decoder
			for name, decode := range map[string]func(*schemas.SeenEntry) error{
				"Decode":               func(e *schemas.SeenEntry) error { return schemas.Decode(b, e) },
				"Decoder.Decode":       func(e *schemas.SeenEntry) error { return d.Decode(b, e) },
				"Decoder.DecodeShared": func(e *schemas.SeenEntry) error { return d.DecodeShared(b, e) },
			} {
				got := schemas.SeenEntry{Scope: "left over"}
				if err := decode(&got); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if got != want {
					t.Fatalf("%s: %+v, want %+v", name, got, want)
				}
			}
			// Standard Protocol Buffers code reads the same fields.
			var m seenpb.SeenEntry
			if err := proto.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if hex.EncodeToString(m.Scope) != want.Scope || hex.EncodeToString(m.NotificationId) != want.NotificationID || m.FirstAt != want.FirstAt ||
				m.ExpiresAt != want.ExpiresAt || m.SourceOffset != want.SourceOffset || m.SourcePartition != want.SourcePartition || m.Outcome != want.Outcome {
				t.Fatalf("proto.Unmarshal read %v, want %+v", &m, want)
			}
		})
	}
}

func TestAppendSeenV2RefusesEntriesWithoutABinaryForm(t *testing.T) {
	cases := []struct {
		name  string
		mod   func(*schemas.SeenEntry)
		field string
	}{
		{"an unknown kind", func(e *schemas.SeenEntry) { e.Kind = "other" }, "kind"},
		{"a scope that is not a herald id", func(e *schemas.SeenEntry) { e.Scope = "x" }, "scope"},
		{"a notification id that is not a herald id", func(e *schemas.SeenEntry) { e.NotificationID = "legacy-7" }, "notificationId"},
		{"a content hash in upper case", func(e *schemas.SeenEntry) { e.ContentHash = strings.ToUpper(e.ContentHash) }, "contentHash"},
		{"a content hash of the wrong length", func(e *schemas.SeenEntry) { e.ContentHash = "0f0f" }, "contentHash"},
		{"a content hash that is not hex", func(e *schemas.SeenEntry) { e.ContentHash = strings.Repeat("zz", 32) }, "contentHash"},
		{"an empty request id", func(e *schemas.SeenEntry) { e.RequestID = "" }, "request_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := seenV2()
			c.mod(&e)
			b, err := schemas.AppendSeenV2(nil, &e)
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("AppendSeenV2 = %x, %v; want an error naming %s", b, err, c.field)
			}
		})
	}
}

func TestDecodeRefusesHeraldSeenV2EntriesThatBreakTheSchema(t *testing.T) {
	valid := func() *seenpb.SeenEntry {
		return &seenpb.SeenEntry{Kind: seenpb.Kind_KIND_DEDUPE, Scope: make([]byte, 16), NotificationId: make([]byte, 16), RequestId: make([]byte, 16),
			Outcome: schemas.DecisionAccepted}
	}
	cases := []struct {
		name string
		mod  func(*seenpb.SeenEntry)
	}{
		{"no kind", func(m *seenpb.SeenEntry) { m.Kind = seenpb.Kind_KIND_UNSPECIFIED }},
		{"an unknown kind", func(m *seenpb.SeenEntry) { m.Kind = 3 }},
		{"a short scope", func(m *seenpb.SeenEntry) { m.Scope = m.Scope[:15] }},
		{"a long scope", func(m *seenpb.SeenEntry) { m.Scope = make([]byte, 17) }},
		{"a short notification id", func(m *seenpb.SeenEntry) { m.NotificationId = nil }},
		{"a long notification id", func(m *seenpb.SeenEntry) { m.NotificationId = make([]byte, 17) }},
		{"no request id in either form", func(m *seenpb.SeenEntry) { m.RequestId = nil }},
		{"a short request id", func(m *seenpb.SeenEntry) { m.RequestId = m.RequestId[:15] }},
		{"a short request id beside its text", func(m *seenpb.SeenEntry) { m.RequestId, m.RequestIdText = m.RequestId[:15], "call #1" }},
		{"a request id in both forms", func(m *seenpb.SeenEntry) { m.RequestIdText = "call #1" }},
		{"a short content hash", func(m *seenpb.SeenEntry) { m.ContentHash = make([]byte, 31) }},
		{"a long content hash", func(m *seenpb.SeenEntry) { m.ContentHash = make([]byte, 33) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := valid()
			c.mod(m)
			if err := schemas.CheckSeenV2(m); !errors.Is(err, schemas.ErrSeenV2) {
				t.Fatalf("CheckSeenV2 = %v, want ErrSeenV2", err)
			}
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var e schemas.SeenEntry
			if err := schemas.Decode(b, &e); !errors.Is(err, schemas.ErrSeenV2) {
				t.Fatalf("Decode = %v, want ErrSeenV2", err)
			}
		})
	}
	t.Run("the valid base entry is accepted", func(t *testing.T) {
		for _, m := range []*seenpb.SeenEntry{valid(), func() *seenpb.SeenEntry { m := valid(); m.RequestId, m.RequestIdText = nil, "x"; return m }(),
			func() *seenpb.SeenEntry { m := valid(); m.ContentHash = make([]byte, 32); return m }()} {
			if err := schemas.CheckSeenV2(m); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("bytes that are not Protocol Buffers are an error", func(t *testing.T) {
		var e schemas.SeenEntry
		for _, b := range [][]byte{{0x0a}, {0x12, 0x10, 1, 2}, {0xff, 0xff, 0xff}, nil} {
			if err := schemas.Decode(b, &e); err == nil {
				t.Fatalf("Decode(% x) read %+v", b, e)
			}
		}
	})
}

func TestIsJSONTellsTheVersionsApartByTheirFirstByte(t *testing.T) {
	v2, err := schemas.AppendSeenV2(nil, func() *schemas.SeenEntry { e := seenV2(); return &e }())
	if err != nil {
		t.Fatal(err)
	}
	v1, err := schemas.Encode(func() *schemas.SeenEntry { e := seenV2(); return &e }())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		b    []byte
		json bool
	}{
		{"a JSON entry", v1, true},
		{"a JSON entry after white space", append([]byte(" \t\r\n"), v1...), true},
		{"a herald.seen/v2 entry", v2, false},
		{"a JSON array", []byte(`[{}]`), false},
		{"white space alone", []byte(" \n"), false},
		{"nothing", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := schemas.IsJSON(c.b); got != c.json {
				t.Fatalf("IsJSON(%q) = %v", c.b, got)
			}
		})
	}
}

func TestAppendSeenProtoDoesNotAllocateWhenDstHasRoom(t *testing.T) {
	e := seenV2()
	m := &seenpb.SeenEntry{Kind: seenpb.Kind_KIND_IDEMPOTENCY, Scope: make([]byte, 16), NotificationId: make([]byte, 16), RequestIdText: e.RequestID,
		ContentHash: make([]byte, 32), Outcome: e.Outcome, FirstAt: e.FirstAt, ExpiresAt: e.ExpiresAt, SourcePartition: 1, SourceOffset: 2}
	dst := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { schemas.AppendSeenProto(dst, m) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	got := schemas.AppendSeenProto(dst, m)
	want, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("AppendSeenProto wrote % x, proto.Marshal % x", got, want)
	}
}

func TestADecodedHeraldSeenV2EntryDoesNotPointIntoTheCallersBytes(t *testing.T) {
	want := seenV2()
	want.RequestID = "call #1, kept as text"
	b, err := schemas.AppendSeenV2(nil, &want)
	if err != nil {
		t.Fatal(err)
	}
	var got schemas.SeenEntry
	if err := schemas.Decode(b, &got); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'x'
	}
	want.Schema = schemas.SeenEntryV2
	if got != want {
		t.Fatalf("after the input was overwritten: %+v, want %+v", got, want)
	}
}
