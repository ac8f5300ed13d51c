package schemas_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/heraldhq/herald/schemas"
)

// awkward strings: escapes encoding/json writes in a particular way, HTML
// characters, separators JavaScript cannot hold raw, non-ASCII, invalid
// UTF-8, control characters.
var awkward = []string{"", "plain", `quote " and \ backslash`, "<b>&amp;</b>", "line\u2028para\u2029", "tab\tnew\nline\rcr",
	"bell\x07 del\x7f nul\x00", "ünïcødé ✓ 😀", "bad \xff utf-8 \xed\xa0\x80", "back\bfeed\f", "\bback first, no feed", "\ffeed first, no back",
	`the text \u0008 and \u000c, not the characters`}

// generated lists the records with generated codecs, each with every
// field set to s.
func generated(s string) []schemas.Record {
	return []schemas.Record{
		&schemas.Request{RequestID: s, Tenant: s, Type: s, Recipient: s, NotificationID: s, IDSource: s, Key: json.RawMessage(`{"k":1}`),
			DedupeKey: s, DedupeWindowMs: 1, IdempotencyKey: s, IdempotencyTTLMs: 2, Title: s, Body: s, Payload: json.RawMessage(`[1,"x"]`),
			Locale: s, Channels: []string{s, "apns"}, TargetDevice: s, Producer: s, Source: s, CreatedAt: -3},
		&schemas.Decision{DecisionID: s, Stage: s, Outcome: s, Detail: s, RequestID: s, Tenant: s, Type: s, Recipient: s, NotificationID: s,
			DedupeKey: s, IdempotencyKey: s, Producer: s, Channel: s, OriginalRequestID: s, OriginalNotificationID: s, OriginalAt: 4,
			OriginalOutcome: s, Deliveries: []schemas.DecisionDelivery{{DeliveryID: s, Channel: s, DeviceID: s, State: s, NotBefore: 5}},
			At: 6, SourceTopic: s, SourcePartition: 7, SourceOffset: 8},
		&schemas.SeenEntry{Kind: schemas.SeenKind(s), Scope: s, NotificationID: s, RequestID: s, ContentHash: s, Outcome: s, FirstAt: 9,
			ExpiresAt: 10, SourcePartition: 11, SourceOffset: 12},
		&schemas.Accepted{NotificationID: s, RequestID: s, Tenant: s, Type: s, Recipient: s, Title: s, Body: s, Payload: json.RawMessage(`{"a":null}`),
			Locale: s, Channels: []string{s}, TargetDevice: s, DedupeKey: s, IdempotencyKey: s, Producer: s, RequestedAt: 13, AcceptedAt: 14},
	}
}

// TestGeneratedCodecsReadAsEncodingJSONDoes is the contract of the
// generated encoders and decoders: what they write, encoding/json reads
// back to the same record, and what they read from encoding/json's output
// is the record encoding/json reads. Empty records, whose omitted fields
// must stay omitted, are covered too.
func TestGeneratedCodecsReadAsEncodingJSONDoes(t *testing.T) {
	for _, s := range awkward {
		for i, r := range append(generated(s), &schemas.Request{}, &schemas.Decision{}, &schemas.SeenEntry{}, &schemas.Accepted{}) {
			t.Run(r.SchemaName()+" with "+strings.ToValidUTF8(s, "?"), func(t *testing.T) {
				fast, err := schemas.Encode(r)
				if err != nil {
					t.Fatal(err)
				}
				viaStd := reflect.New(reflect.TypeOf(r).Elem()).Interface()
				if err := json.Unmarshal(fast, viaStd); err != nil {
					t.Fatalf("encoding/json cannot read %s: %v", fast, err)
				}
				std, _ := json.Marshal(r)
				var want any = r
				if i >= len(generated(s)) {
					if err := json.Unmarshal(std, viaStd); err != nil { // the zero record with its schema set
						t.Fatal(err)
					}
					want = viaStd
				}
				if !reflect.DeepEqual(normalized(t, viaStd), normalized(t, want)) {
					t.Fatalf("generated encoding %s reads back as %+v, want %+v", fast, viaStd, want)
				}
				viaFast := reflect.New(reflect.TypeOf(r).Elem()).Interface().(schemas.Record)
				if err := schemas.Decode(std, viaFast); err != nil {
					t.Fatalf("decode %s: %v", std, err)
				}
				fromStd := reflect.New(reflect.TypeOf(r).Elem()).Interface()
				_ = json.Unmarshal(std, fromStd)
				if !reflect.DeepEqual(viaFast, fromStd) {
					t.Fatalf("generated decoding of %s is %+v, encoding/json's %+v", std, viaFast, fromStd)
				}
			})
		}
	}
}

// normalized is v through encoding/json and back into a generic value, so
// records that differ only in how a string was spelled compare equal.
func normalized(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGeneratedDecodersRefuseWhatEncodingJSONRefuses(t *testing.T) {
	cases := []struct{ name, doc string }{
		{"a document cut short", `{"schema":"herald.request/v1","tenant":"a"`},
		{"invalid JSON inside an unknown field", `{"schema":"herald.request/v1","extra":[tru]}`},
		{"a number where a string belongs", `{"schema":"herald.request/v1","tenant":1}`},
		{"a fraction where an integer belongs", `{"schema":"herald.request/v1","createdAt":1.5}`},
		{"trailing data after the object", `{"schema":"herald.request/v1"} {}`},
		{"another record's schema", `{"schema":"herald.decision/v1"}`},
		{"JSON null", `null`},
		{"a raw line feed inside a string", "{\"schema\":\"herald.request/v1\",\"title\":\"a\nb\"}"},
		{"a number with a leading zero", `{"schema":"herald.request/v1","createdAt":01}`},
	}
	for _, c := range cases {
		t.Run(c.name+" is refused", func(t *testing.T) {
			var r schemas.Request
			if err := schemas.Decode([]byte(c.doc), &r); err == nil {
				t.Fatalf("decoded %s as %+v", c.doc, r)
			}
		})
	}
}

func TestADecodedRequestDoesNotPointIntoTheCallersBytes(t *testing.T) {
	b, _ := schemas.Encode(&schemas.Request{Tenant: "acme", Title: "hello"})
	var r schemas.Request
	if err := schemas.Decode(b, &r); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'x'
	}
	if r.Tenant != "acme" || r.Title != "hello" {
		t.Fatalf("the request changed with the caller's buffer: tenant %q, title %q", r.Tenant, r.Title)
	}
}

func TestAppendEncodeAppendsWhetherOrNotTheRecordFits(t *testing.T) {
	d := &schemas.Decision{DecisionID: strings.Repeat("d", 3000), Outcome: schemas.DecisionAccepted}
	want, _ := json.Marshal(d) // Schema was set by no one yet: compare fields, not bytes
	for _, room := range []int{0, 16, 1024, 1025, 4096, 8192} {
		t.Run("with room for "+strings.Repeat("x", 0)+itoa(room)+" bytes", func(t *testing.T) {
			dst := append(make([]byte, 0, 3+room), "pre"...)
			var e schemas.Encoder
			got, err := e.Append(dst, d)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(got, []byte("pre")) {
				t.Fatalf("the prefix is gone: %.20s", got)
			}
			var back schemas.Decision
			if err := schemas.Decode(got[3:], &back); err != nil {
				t.Fatal(err)
			}
			var ref schemas.Decision
			_ = json.Unmarshal(want, &ref)
			ref.Schema = schemas.DecisionV1
			if !reflect.DeepEqual(back, ref) {
				t.Fatalf("read back %+v, want %+v", back, ref)
			}
			// The encoder's pool never gets dst's memory: once the caller
			// fills dst's free capacity (as the dedupe task's slab does
			// with its next records), encoding other records elsewhere
			// leaves it as it was.
			kept := bytes.Clone(got)
			free := dst[3:cap(dst)] // the record did not fit: all of dst's room is the caller's
			if len(got) <= cap(dst) {
				free = got[len(got):cap(got)] // it fit: the room after it is
			}
			free = append(free[:0], bytes.Repeat([]byte("m"), len(free))...)
			for range 20 {
				if _, err := schemas.Encode(&schemas.Decision{DecisionID: strings.Repeat("z", 40000)}); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, kept) {
				t.Fatal("encoding another record overwrote the first")
			}
			if string(free) != strings.Repeat("m", len(free)) {
				t.Fatalf("encoding other records wrote into the caller's buffer: %q", free[:min(len(free), 40)])
			}
		})
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestRecipientKeysEscapeAsPathEscapeDoes(t *testing.T) {
	for _, s := range append(awkward, "a/b", "a b", "x?y#z", "100%", "~user_1.2-3", "$&+,:;=@") {
		t.Run(strings.ToValidUTF8(s, "?"), func(t *testing.T) {
			want := url.PathEscape(s) + "/" + url.PathEscape(s+"r")
			if got := string(schemas.AppendRecipientKey(nil, s, s+"r")); got != want {
				t.Fatalf("AppendRecipientKey = %q, want %q", got, want)
			}
			if got := schemas.RecipientKey(s, s+"r"); got != want {
				t.Fatalf("RecipientKey = %q, want %q", got, want)
			}
			if got := schemas.FeedKey(s, s+"r", s+"n"); got != want+"/"+url.PathEscape(s+"n") {
				t.Fatalf("FeedKey = %q, want %q", got, want+"/"+url.PathEscape(s+"n"))
			}
		})
	}
}

func TestContentHashIsTheHashOfEncodingJSONsText(t *testing.T) {
	for _, s := range awkward {
		for _, payload := range []string{"", `{"b":1,"a":[2.50,"x"]}`} {
			r := schemas.Request{Type: s, Recipient: s + "r", DedupeKey: s, Title: s, Body: s, Locale: s, Channels: []string{s}, TargetDevice: s,
				Payload: json.RawMessage(payload)}
			t.Run(strings.ToValidUTF8(s, "?")+" payload "+payload, func(t *testing.T) {
				if got, want := r.ContentHash(), legacyContentHash(r); got != want {
					t.Fatalf("ContentHash %s, want %s (the hash stored by earlier versions)", got, want)
				}
			})
		}
	}
	t.Run("a request without channels or device", func(t *testing.T) {
		r := schemas.Request{Type: "t", Recipient: "u"}
		if got, want := r.ContentHash(), legacyContentHash(r); got != want {
			t.Fatalf("ContentHash %s, want %s", got, want)
		}
	})
}

func TestGeneratedDecodersReadStringsAsEncodingJSONDoes(t *testing.T) {
	for _, doc := range []string{
		"{\"schema\":\"herald.request/v1\",\"tenant\":\"ac\xffme\",\"title\":\"\xed\xa0\x80\"}",
		`{"schema":"herald.request/v1","tenant":"\ud800","title":"\udc00x\ud83d\ude00","body":"\u00e9\/\b"}`,
	} {
		t.Run(strings.ToValidUTF8(doc, "?"), func(t *testing.T) {
			var got, want schemas.Request
			if err := schemas.Decode([]byte(doc), &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(doc), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded %+v, encoding/json reads %+v", got, want)
			}
		})
	}
}

// TestDecodeSharedReadsWhatDecodeReads: whatever the document, a
// Decoder's DecodeShared gives the record and the success or failure that
// Decode gives, whether it takes its fast path (the canonical encoding of
// a seen entry) or not.
func TestDecodeSharedReadsWhatDecodeReads(t *testing.T) {
	canonical := `{"schema":"herald.seen/v1","kind":"dedupe","scope":"0a","notificationId":"n","requestId":"r","contentHash":"c","outcome":"accepted","firstAt":1,"expiresAt":2,"sourcePartition":3,"sourceOffset":4}`
	cases := []struct{ name, doc string }{
		{"the canonical encoding", canonical},
		{"spaces between fields", strings.Replace(canonical, `,"kind"`, `, "kind"`, 1)},
		{"fields in another order", `{"kind":"dedupe","schema":"herald.seen/v1","scope":"0a"}`},
		{"a field missing", strings.Replace(canonical, `"contentHash":"c",`, ``, 1)},
		{"an unknown field", strings.Replace(canonical, `"kind"`, `"extra":[1],"kind"`, 1)},
		{"a field twice", strings.Replace(canonical, `"kind":"dedupe"`, `"kind":"idem","kind":"dedupe"`, 1)},
		{"an escape where the encoder writes the character", strings.Replace(canonical, `"scope":"0a"`, `"scope":"0\u0061"`, 1)},
		{"a number with a leading zero", strings.Replace(canonical, `"firstAt":1`, `"firstAt":01`, 1)},
		{"a raw line feed inside a string", strings.Replace(canonical, `"scope":"0a"`, "\"scope\":\"0\na\"", 1)},
		{"invalid UTF-8 inside a string", strings.Replace(canonical, `"scope":"0a"`, "\"scope\":\"0\xffa\"", 1)},
		{"an empty schema", strings.Replace(canonical, `"herald.seen/v1"`, `""`, 1)},
		{"another record's schema", strings.Replace(canonical, `"herald.seen/v1"`, `"herald.request/v1"`, 1)},
		{"trailing data after the object", canonical + ` {}`},
		{"spaces after the object", canonical + "\n"},
		{"a document cut short", canonical[:len(canonical)-1]},
		{"JSON null", `null`},
	}
	for _, s := range awkward {
		b, _ := schemas.Encode(generated(s)[2])
		cases = append(cases, struct{ name, doc string }{"the encoding of an entry of " + strings.ToValidUTF8(s, "?"), string(b)})
	}
	var d schemas.Decoder // one for all: its buffer is reused
	for _, c := range cases {
		t.Run(c.name+" reads as Decode reads it", func(t *testing.T) {
			var want, got schemas.SeenEntry
			wantErr := schemas.Decode([]byte(c.doc), &want)
			got = schemas.SeenEntry{Scope: "left over"}
			gotErr := d.DecodeShared([]byte(c.doc), &got)
			if (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("DecodeShared: error %v, Decode: error %v", gotErr, wantErr)
			}
			if wantErr == nil && got != want {
				t.Fatalf("DecodeShared read %+v, Decode %+v", got, want)
			}
		})
	}
	t.Run("a record other than a seen entry reads as Decode reads it", func(t *testing.T) {
		b, _ := schemas.Encode(&schemas.Request{Tenant: "acme", Title: "hello"})
		var want, got schemas.Request
		if err := schemas.Decode(b, &want); err != nil {
			t.Fatal(err)
		}
		if err := d.DecodeShared(b, &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeShared read %+v (error %v), Decode %+v", got, err, want)
		}
	})
}

// TestDecodeSharedReadsTheCanonicalEncodingInPlace: a seen entry as
// Encode writes it is read without a copy (its strings point into the
// caller's bytes) and without allocating, the restore's fast path;
// a longer entry than the decoder's buffer holds is read alike.
func TestDecodeSharedReadsTheCanonicalEncodingInPlace(t *testing.T) {
	for _, scope := range []string{"0a", strings.Repeat("s", 5000)} {
		t.Run(fmt.Sprintf("with a %d-byte scope", len(scope)), func(t *testing.T) {
			b, _ := schemas.Encode(&schemas.SeenEntry{Kind: schemas.SeenDedupe, Scope: scope, Outcome: schemas.DecisionAccepted, FirstAt: 5})
			var d schemas.Decoder
			var e schemas.SeenEntry
			if err := d.DecodeShared(b, &e); err != nil {
				t.Fatal(err)
			}
			i := bytes.Index(b, []byte(scope))
			if e.Scope != scope || unsafe.StringData(e.Scope) != &b[i] {
				t.Fatalf("scope %q does not point into the encoding", e.Scope)
			}
			if len(scope) < 4095 {
				if n := testing.AllocsPerRun(100, func() { _ = d.DecodeShared(b, &e) }); n != 0 {
					t.Fatalf("%v allocations per decode, want 0", n)
				}
			}
		})
	}
}

// TestDecoderReadsRequestsAsDecodeDoes: a Decoder reads a request with
// the record and the success or failure Decode gives, whether the
// request is exactly what Encode writes (its fast path) or not, raw JSON
// fields (key, payload) included, which the generated encoder copies as
// they are and so must be checked apart; and its strings never point into
// the caller's bytes.
func TestDecoderReadsRequestsAsDecodeDoes(t *testing.T) {
	canonical, _ := schemas.Encode(&schemas.Request{RequestID: "r", Tenant: "acme", Type: "t", Recipient: "u", NotificationID: "n",
		Key: json.RawMessage(`{"k":1}`), Title: "hi", Payload: json.RawMessage(`{"p":[1,"x"]}`), Channels: []string{"apns"}, CreatedAt: 7})
	doc := string(canonical)
	cases := []struct{ name, doc string }{
		{"the canonical encoding", doc},
		{"encoding/json's encoding", func() string {
			b, _ := json.Marshal(&schemas.Request{Schema: schemas.RequestV1, Title: "<&>"})
			return string(b)
		}()},
		{"a payload that is not JSON", strings.Replace(doc, `{"p":[1,"x"]}`, `{"p":[tru]}`, 1)},
		{"a payload with invalid UTF-8", strings.Replace(doc, `"x"`, "\"\xff\"", 1)},
		{"a payload with a raw line feed in a string", strings.Replace(doc, `"x"`, "\"\n\"", 1)},
		{"a payload with spaces inside", strings.Replace(doc, `[1,"x"]`, `[1, "x"]`, 1)},
		{"a payload string with a raw line feed", strings.Replace(doc, `{"p":[1,"x"]}`, "\"a\nb\"", 1)},
		{"a payload number with a leading zero", strings.Replace(doc, `{"p":[1,"x"]}`, `01`, 1)},
		{"a payload string with invalid UTF-8", strings.Replace(doc, `{"p":[1,"x"]}`, "\"\xff\"", 1)},
		{"a key that is not JSON", strings.Replace(doc, `{"k":1}`, `{"k":01}`, 1)},
		{"a key number with a leading zero", strings.Replace(doc, `{"k":1}`, `01`, 1)},
		{"a null key", strings.Replace(doc, `{"k":1}`, `null`, 1)},
		{"a null channel list", strings.Replace(doc, `["apns"]`, `null`, 1)},
		{"a number with a leading zero", strings.Replace(doc, `"createdAt":7`, `"createdAt":07`, 1)},
		{"a raw line feed in the title", strings.Replace(doc, `"hi"`, "\"h\ni\"", 1)},
		{"another record's schema", strings.Replace(doc, schemas.RequestV1, schemas.SeenEntryV1, 1)},
		{"trailing data after the object", doc + `{}`},
	}
	for _, s := range awkward {
		b, _ := schemas.Encode(generated(s)[0])
		cases = append(cases, struct{ name, doc string }{"the encoding of a request of " + strings.ToValidUTF8(s, "?"), string(b)})
	}
	var d schemas.Decoder
	for _, c := range cases {
		t.Run(c.name+" reads as Decode reads it", func(t *testing.T) {
			decodesAsDecode(t, &d, c.doc, func() *schemas.Request { return &schemas.Request{Title: "left over"} })
		})
	}
}

// decodesAsDecode checks that d reads doc, with Decode and DecodeShared,
// into a record left over from another (made by leftOver), as the
// package's Decode reads it into a fresh one: the same record, or an
// error for both; and that Decode's record does not point into doc's
// bytes (they are overwritten before the comparison).
func decodesAsDecode[T any, P interface {
	*T
	schemas.Record
}](t *testing.T, d *schemas.Decoder, doc string, leftOver func() P) {
	t.Helper()
	want := P(new(T))
	wantErr := schemas.Decode([]byte(doc), want)
	for _, shared := range []bool{false, true} {
		got := leftOver()
		b := []byte(doc)
		var gotErr error
		if shared {
			gotErr = d.DecodeShared(b, got)
		} else {
			gotErr = d.Decode(b, got)
			for i := range b {
				b[i] = 'x'
			}
		}
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("shared %v: error %v, Decode: error %v", shared, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("shared %v: read %+v, Decode %+v", shared, got, want)
		}
	}
}

// TestDecodeSharedReadsACanonicalRequestInPlace: a request as Encode
// writes it is read by the fast path, its strings pointing into the
// caller's bytes.
func TestDecodeSharedReadsACanonicalRequestInPlace(t *testing.T) {
	b, _ := schemas.Encode(&schemas.Request{Tenant: "acme", Title: "hello", Payload: json.RawMessage(`{"a":1}`)})
	var d schemas.Decoder
	var r schemas.Request
	if err := d.DecodeShared(b, &r); err != nil {
		t.Fatal(err)
	}
	if i := bytes.Index(b, []byte(`"hello"`)); r.Title != "hello" || unsafe.StringData(r.Title) != &b[i+1] {
		t.Fatalf("title %q does not point into the encoding", r.Title)
	}
}

// TestDecoderReadsDecisionsAsDecodeDoes: a Decoder reads a decision with
// the record and the success or failure Decode gives, whether it is
// exactly what Encode writes (its fast path) or not, into a decision left
// over from another; a decision read by Decode never points into the
// caller's bytes, one read by DecodeShared from the canonical encoding
// does.
func TestDecoderReadsDecisionsAsDecodeDoes(t *testing.T) {
	canonical, _ := schemas.Encode(&schemas.Decision{DecisionID: "dedupe/requests/1/2", Stage: "dedupe", Outcome: "duplicate",
		RequestID: "r", Tenant: "acme", Type: "t", Recipient: "u", NotificationID: "n", OriginalAt: 3,
		Deliveries: []schemas.DecisionDelivery{{DeliveryID: "d", Channel: "apns", DeviceID: "x", State: "queued", NotBefore: 4}},
		At:         5, SourceTopic: "requests", SourcePartition: 1, SourceOffset: 2})
	doc := string(canonical)
	cases := []struct{ name, doc string }{
		{"the canonical encoding", doc},
		{"encoding/json's encoding", func() string {
			b, _ := json.Marshal(&schemas.Decision{Schema: schemas.DecisionV1, Detail: "<&>"})
			return string(b)
		}()},
		{"spaces between fields", strings.Replace(doc, `,"stage"`, `, "stage"`, 1)},
		{"fields in another order", `{"stage":"dedupe","schema":"` + schemas.DecisionV1 + `"}`},
		{"a field missing", strings.Replace(doc, `"tenant":"acme",`, ``, 1)},
		{"an unknown field", strings.Replace(doc, `"stage"`, `"extra":{},"stage"`, 1)},
		{"an escape where the encoder writes the character", strings.Replace(doc, `"acme"`, `"\u0061cme"`, 1)},
		{"a number with a leading zero", strings.Replace(doc, `"at":5`, `"at":05`, 1)},
		{"a raw line feed inside a string", strings.Replace(doc, `"acme"`, "\"ac\nme\"", 1)},
		{"invalid UTF-8 inside a string", strings.Replace(doc, `"acme"`, "\"ac\xffme\"", 1)},
		{"null deliveries", strings.Replace(doc, doc[strings.Index(doc, `[{`):strings.Index(doc, `}]`)+2], `null`, 1)},
		{"a delivery field unknown", strings.Replace(doc, `"deliveryId"`, `"x":1,"deliveryId"`, 1)},
		{"another record's schema", strings.Replace(doc, schemas.DecisionV1, schemas.RequestV1, 1)},
		{"trailing data after the object", doc + `{}`},
		{"a document cut short", doc[:len(doc)-1]},
	}
	for _, s := range awkward {
		b, _ := schemas.Encode(generated(s)[1])
		cases = append(cases, struct{ name, doc string }{"the encoding of a decision of " + strings.ToValidUTF8(s, "?"), string(b)})
	}
	var d schemas.Decoder
	for _, c := range cases {
		t.Run(c.name+" reads as Decode reads it", func(t *testing.T) {
			decodesAsDecode(t, &d, c.doc, func() *schemas.Decision {
				return &schemas.Decision{Detail: "left over", OriginalAt: 9, Deliveries: []schemas.DecisionDelivery{{}}}
			})
		})
	}
	t.Run("the canonical encoding is read in place", func(t *testing.T) {
		var got schemas.Decision
		if err := d.DecodeShared(canonical, &got); err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(canonical, []byte(`"acme"`))
		if got.Tenant != "acme" || unsafe.StringData(got.Tenant) != &canonical[i+1] {
			t.Fatalf("tenant %q does not point into the encoding", got.Tenant)
		}
	})
}
