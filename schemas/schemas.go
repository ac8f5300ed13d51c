package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/mailru/easyjson"
	"github.com/mailru/easyjson/buffer"
	"github.com/mailru/easyjson/jlexer"
	"github.com/mailru/easyjson/jwriter"
)

// Record is implemented by every topic value type.
type Record interface {
	// SchemaName is the record's name and major version, e.g. "herald.request/v1".
	SchemaName() string
}

// Schema names, one per record type and major version.
const (
	RequestV1         = "herald.request/v1"
	DecisionV1        = "herald.decision/v1"
	SeenEntryV1       = "herald.seen/v1"
	AcceptedV1        = "herald.accepted/v1"
	DeliveryCommandV1 = "herald.delivery/v1"
	AttemptV1         = "herald.attempt/v1"
	OutcomeV1         = "herald.outcome/v1"
	DeviceV1          = "herald.device/v1"
	PreferencesV1     = "herald.preferences/v1"
	SegmentV1         = "herald.segment/v1"
	RouteEntryV1      = "herald.route/v1"
	SinkEntryV1       = "herald.sinkentry/v1"
	FeedItemV1        = "herald.feeditem/v1"
	ReceiptV1         = "herald.receipt/v1"
	WebhookV1         = "herald.webhook/v1"
	CompletionV1      = "herald.completion/v1"
	FallbackV1        = "herald.fallback/v1"
	// FallbackWatermarkV1: processors/fallback's watermarks.
	FallbackWatermarkV1 = "herald.fallbackwatermark/v1"
)

// ErrSchema is wrapped by decode errors caused by a wrong or missing schema name.
var ErrSchema = errors.New("schemas: unexpected schema")

// HeaderSchema is the Kafka record header that repeats the value's schema
// name, so consumers can route without parsing the value.
const HeaderSchema = "herald-schema"

// Encode marshals r with its "schema" field set to r.SchemaName(), whatever
// the Schema field holds when empty; a different non-empty one is an error,
// and so is a nil pointer. It is AppendEncode(nil, r).
func Encode(r Record) ([]byte, error) { return AppendEncode(nil, r) }

// AppendEncode is Encode appending the encoding to dst.
func AppendEncode(dst []byte, r Record) ([]byte, error) {
	var e Encoder
	return e.Append(dst, r)
}

// An Encoder encodes records as Encode does, keeping its state between
// calls. The records of the dedupe stage's path (Request, Decision,
// SeenEntry, Accepted), given as pointers, are written by generated code
// (see "Codec" in the package doc): no reflection, and no allocation when
// dst has room. The zero Encoder is ready; it is not safe for concurrent
// use.
type Encoder struct {
	w jwriter.Writer
}

// Append is Encode appending the encoding to dst.
func (e *Encoder) Append(dst []byte, r Record) ([]byte, error) {
	if out, ok := appendBinary(dst, r); ok {
		return out, nil
	}
	// A pointer's empty Schema field is set in place, so the output needs no
	// second copy; a value is spliced below.
	if v := reflect.ValueOf(r); v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil, fmt.Errorf("schemas: encode %T: nil record", r)
		}
		f := v.Elem().Field(0)
		if f.String() == "" {
			f.SetString(r.SchemaName())
		}
		if m, ok := r.(easyjson.Marshaler); ok {
			if f.String() != r.SchemaName() {
				return nil, fmt.Errorf("%w: encode %s: schema field holds another name", ErrSchema, r.SchemaName())
			}
			e.start(dst)
			m.MarshalEasyJSON(&e.w)
			return e.finish(dst)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("schemas: encode %s: %w", r.SchemaName(), err)
	}
	// Every record's first field is Schema, so the output starts with it.
	const empty = `{"schema":""`
	want := `{"schema":"` + r.SchemaName() + `"`
	switch {
	case bytes.HasPrefix(b, []byte(empty)):
		return append(append(dst, want...), b[len(empty):]...), nil
	case bytes.HasPrefix(b, []byte(want)):
		return append(dst, b...), nil
	default:
		return nil, fmt.Errorf("%w: encode %s: schema field holds another name", ErrSchema, r.SchemaName())
	}
}

// start points the generated encoder's buffer at the free capacity of
// dst, with a capacity that is not a power of two: the encoder's buffer
// pool takes back only chunks of power-of-two sizes, so it never recycles
// memory of dst. The encoding overflows into pooled chunks only when dst
// is too small.
func (e *Encoder) start(dst []byte) {
	free := cap(dst) - len(dst)
	if free > 0 && free&(free-1) == 0 {
		free-- // a power of two: one byte less
	}
	e.w = jwriter.Writer{}
	e.w.Buffer.Buf = dst[len(dst) : len(dst) : len(dst)+free]
}

// finish returns dst with what the generated encoder wrote since start
// appended: in place when it fit (the copy is onto itself), else in a new
// slice.
func (e *Encoder) finish(dst []byte) ([]byte, error) {
	b, err := e.w.Buffer.BuildBytes(), e.w.Error
	e.w = jwriter.Writer{}
	if err != nil {
		return nil, fmt.Errorf("schemas: encode: %w", err)
	}
	return append(dst, b...), nil
}

// Decode unmarshals b into r and checks that its "schema" field names r's
// record and major version. A SeenEntry is read from either version of
// herald.seen: a JSON object (herald.seen/v1) or herald.seen/v2 (see
// SeenEntryV2), its Schema field naming the one read. On an error r may
// be partly filled: discard it.
// Records with generated decoders (see "Codec" in the package doc) are
// read without reflection; the strings of a Request, SeenEntry or
// Decision then share one copy of b.
func Decode(b []byte, r Record) error {
	if !IsJSON(b) {
		if e, ok := r.(*SeenEntry); ok {
			return decodeSeenV2(b, e)
		}
		if ok, err := decodeBinary(b, r, true); ok {
			return err
		}
	}
	// The generated decoders read what encoding/json reads only from valid
	// JSON in valid UTF-8 (encoding/json replaces invalid bytes in a
	// string with U+FFFD; they would keep them): anything else goes
	// through encoding/json.
	if u, ok := r.(easyjson.Unmarshaler); ok && utf8.Valid(b) && json.Valid(b) {
		switch r.(type) {
		case *Request, *SeenEntry, *Decision:
			b = bytes.Clone(b) // their strings point into the copy, never into the caller's b
		}
		l := jlexer.Lexer{Data: b}
		u.UnmarshalEasyJSON(&l)
		if err := l.Error(); err != nil {
			return fmt.Errorf("schemas: decode %s: %w", r.SchemaName(), err)
		}
	} else if err := json.Unmarshal(b, r); err != nil {
		return fmt.Errorf("schemas: decode %s: %w", r.SchemaName(), err)
	}
	// Every record's first field is Schema (see Encode): one pass, no
	// second parse of the document just for its header.
	got := reflect.ValueOf(r).Elem().Field(0).String()
	if got != r.SchemaName() {
		return fmt.Errorf("%w: got %q, want %q", ErrSchema, got, r.SchemaName())
	}
	return nil
}

// A Decoder decodes records as Decode does, keeping a scratch buffer
// between calls. The zero Decoder is ready; it is not safe for concurrent
// use.
type Decoder struct {
	w   jwriter.Writer // here, not on the stack: the generated encoder's interface call would move it to the heap
	buf []byte
}

// Decode is the package's Decode, faster for a record that is exactly
// what Encode writes (see DecodeShared): the strings of a decoded
// Request, SeenEntry or Decision share one copy of b, as with Decode.
func (d *Decoder) Decode(b []byte, r Record) error { return d.decode(b, r, true) }

// DecodeShared is Decode for a caller that uses r only while b is
// unchanged: the strings of a decoded Request, SeenEntry or Decision may
// point into b instead of a copy. A Request, SeenEntry or Decision that is
// exactly what Encode writes (every entry herald writes to herald.seen,
// every request the API writes, every decision) is read by the generated
// decoder alone, without Decode's
// validity passes over the whole document: the generated encoder writes
// only valid JSON in valid UTF-8, so a document it reproduces byte for
// byte from what the generated decoder read, with its raw JSON fields (a
// request's key and payload, which the encoder copies as they are) valid
// JSON in valid UTF-8, is one Decode would have read the same, with the
// same generated decoder. Anything else (another record type, another
// field order, spacing or escaping, an invalid document) goes through
// Decode, after the attempt.
func (d *Decoder) DecodeShared(b []byte, r Record) error { return d.decode(b, r, false) }

func (d *Decoder) decode(b []byte, r Record, clone bool) error {
	if !IsJSON(b) {
		if ok, err := decodeBinary(b, r, clone); ok {
			return err
		}
	}
	// Each case is written out, not generic: the generated decoder called
	// through a type parameter moves the lexer to the heap.
	switch e := r.(type) {
	case *SeenEntry:
		if !IsJSON(b) {
			return decodeSeenV2(b, e)
		}
		*e = SeenEntry{} // the generated decoder leaves fields the document lacks as they are
		l := lexer(b, clone)
		if e.UnmarshalEasyJSON(&l); l.Error() == nil && e.canonical() && d.encodes(e, b) {
			return nil
		}
		*e = SeenEntry{}
	case *Request:
		*e = Request{} // the generated decoder leaves fields the document lacks as they are
		l := lexer(b, clone)
		if e.UnmarshalEasyJSON(&l); l.Error() == nil && e.canonical() && d.encodes(e, b) {
			return nil
		}
		*e = Request{}
	case *Decision:
		*e = Decision{} // the generated decoder leaves fields the document lacks as they are
		l := lexer(b, clone)
		if e.UnmarshalEasyJSON(&l); l.Error() == nil && e.canonical() && d.encodes(e, b) {
			return nil
		}
		*e = Decision{}
	}
	return Decode(b, r)
}

// lexer reads b, or a copy of it when clone.
func lexer(b []byte, clone bool) jlexer.Lexer {
	return jlexer.Lexer{Data: own(b, clone)}
}

// canonical reports whether a record read by the fast path names its own
// schema and has valid raw JSON fields (see validRaw): a request's key
// and payload; the others have none.
func (r *Request) canonical() bool {
	return r.Schema == RequestV1 && validRaw(r.Key) && validRaw(r.Payload)
}
func (e *SeenEntry) canonical() bool { return e.Schema == SeenEntryV1 }
func (d *Decision) canonical() bool  { return d.Schema == DecisionV1 }

// validRaw reports whether a raw JSON field read by a generated decoder
// (which skips over it without checking it) is absent or valid JSON in
// valid UTF-8.
func validRaw(m json.RawMessage) bool {
	return len(m) == 0 || utf8.Valid(m) && json.Valid(m)
}

// encodes reports whether the generated encoder writes b for m.
func (d *Decoder) encodes(m easyjson.Marshaler, b []byte) bool {
	if d.buf == nil {
		// Not a power of two: the encoder's pool, which takes back only
		// chunks of power-of-two sizes, never takes it (see start).
		d.buf = make([]byte, 0, 4095)
	}
	d.w = jwriter.Writer{Buffer: buffer.Buffer{Buf: d.buf[:0]}}
	m.MarshalEasyJSON(&d.w)
	same := d.w.Error == nil && bytes.Equal(d.w.Buffer.BuildBytes(), b) // a copy only if it outgrew buf
	d.w = jwriter.Writer{}
	return same
}

// RecipientKey is the key of records partitioned by recipient: the tenant and
// recipient, each path-escaped, joined by "/".
func RecipientKey(tenant, recipient string) string {
	return string(AppendRecipientKey(nil, tenant, recipient))
}

// DeviceKey is the compacted key of one device: RecipientKey plus "/" and the
// escaped device id.
func DeviceKey(tenant, recipient, device string) string {
	return RecipientKey(tenant, recipient) + "/" + url.PathEscape(device)
}

// FeedKey is the compacted key of one in-app feed item: RecipientKey plus
// "/" and the notification id. One key per notification and recipient, so
// the feed holds one item however many deliveries name it.
func FeedKey(tenant, recipient, notificationID string) string {
	return RecipientKey(tenant, recipient) + "/" + url.PathEscape(notificationID)
}

// RecipientPrefix returns the RecipientKey part of a RecipientKey or
// DeviceKey: everything before the second "/". Partitioners hash this prefix
// so a recipient's devices, preferences and notifications share a partition.
func RecipientPrefix(key string) string {
	first := strings.IndexByte(key, '/')
	if first < 0 {
		return key
	}
	second := strings.IndexByte(key[first+1:], '/')
	if second < 0 {
		return key
	}
	return key[:first+1+second]
}

// SeenKey is the compacted key of one seen-set entry.
func SeenKey(kind SeenKind, scope string) string { return string(kind) + "/" + scope }

// AppendRecipientKey appends RecipientKey(tenant, recipient) to b.
func AppendRecipientKey(b []byte, tenant, recipient string) []byte {
	b = appendPathEscaped(b, tenant)
	b = append(b, '/')
	return appendPathEscaped(b, recipient)
}

// appendPathEscaped appends url.PathEscape(s), which returns s itself,
// without allocating, when nothing in it needs escaping.
func appendPathEscaped(b []byte, s string) []byte {
	return append(b, url.PathEscape(s)...)
}
