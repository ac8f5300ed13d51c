package schemas_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/heraldhq/herald/schemas"
)

// binaryOf returns r (a *Request, *Decision or *Accepted) with its Schema
// set to its binary version.
func binaryOf(t *testing.T, r schemas.Record) schemas.Record {
	t.Helper()
	switch v := r.(type) {
	case *schemas.Request:
		v.Schema = schemas.RequestV2
	case *schemas.Decision:
		v.Schema = schemas.DecisionV2
	case *schemas.Accepted:
		v.Schema = schemas.AcceptedV2
	default:
		t.Fatalf("%T has no binary version", r)
	}
	return r
}

// withBinaryVersion lists the records with a binary version, each with
// every field set to s, and their zero records.
func withBinaryVersion(s string) []schemas.Record {
	var out []schemas.Record
	for _, r := range append(generated(s), &schemas.Request{}, &schemas.Decision{}, &schemas.Accepted{}) {
		if _, seen := r.(*schemas.SeenEntry); !seen {
			out = append(out, r)
		}
	}
	return out
}

func TestBinaryRecordsReadBackAsTheRecordsWritten(t *testing.T) {
	for _, s := range awkward {
		if !utf8.ValidString(s) {
			continue // refused: see TestDecodeRefusesBinaryRecordsThatBreakTheirSchema
		}
		for _, r := range withBinaryVersion(s) {
			r = binaryOf(t, r)
			t.Run(schemas.NameOf(r)+" with "+s, func(t *testing.T) {
				b, err := schemas.Encode(r)
				if err != nil {
					t.Fatal(err)
				}
				if schemas.IsJSON(b) {
					t.Fatalf("a binary value reads as JSON: % x", b)
				}
				var dec schemas.Decoder
				for name, decode := range map[string]func([]byte, schemas.Record) error{
					"Decode": schemas.Decode, "Decoder.Decode": dec.Decode, "Decoder.DecodeShared": dec.DecodeShared,
				} {
					got := reflect.New(reflect.TypeOf(r).Elem()).Interface().(schemas.Record)
					if err := decode(b, got); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if !reflect.DeepEqual(got, r) {
						t.Fatalf("%s read\n%+v\nwant\n%+v", name, got, r)
					}
				}
			})
		}
	}
}

func TestBothVersionsOfARecordHoldTheSameFields(t *testing.T) {
	for _, r := range withBinaryVersion("ünïcødé ✓") {
		t.Run(r.SchemaName(), func(t *testing.T) {
			v1, err := schemas.Encode(r)
			if err != nil {
				t.Fatal(err)
			}
			fromJSON := reflect.New(reflect.TypeOf(r).Elem()).Interface().(schemas.Record)
			if err := schemas.Decode(v1, fromJSON); err != nil {
				t.Fatal(err)
			}
			v2, err := schemas.Encode(binaryOf(t, r))
			if err != nil {
				t.Fatal(err)
			}
			fromBinary := reflect.New(reflect.TypeOf(r).Elem()).Interface().(schemas.Record)
			if err := schemas.Decode(v2, fromBinary); err != nil {
				t.Fatal(err)
			}
			// The same record but for the Schema field, which names the version.
			reflect.ValueOf(fromBinary).Elem().Field(0).SetString(r.SchemaName())
			if !reflect.DeepEqual(fromJSON, fromBinary) {
				t.Fatalf("the versions differ:\nv1 %+v\nv2 %+v", fromJSON, fromBinary)
			}
			if len(v2) >= len(v1) {
				t.Errorf("the binary version is %d bytes, the JSON one %d", len(v2), len(v1))
			}
		})
	}
}

// TestABinaryValueNeverStartsLikeJSON sets one field at a time, so every
// field is once the value's first: whatever it holds, the value does not
// start with JSON white space or '{', so IsJSON tells it apart.
func TestABinaryValueNeverStartsLikeJSON(t *testing.T) {
	for _, zero := range []schemas.Record{&schemas.Request{}, &schemas.Decision{}, &schemas.Accepted{}} {
		typ := reflect.TypeOf(zero).Elem()
		for i := 1; i < typ.NumField(); i++ { // field 0 is Schema
			f := typ.Field(i)
			t.Run(typ.Name()+"."+f.Name+" alone", func(t *testing.T) {
				r := reflect.New(typ)
				v := r.Elem().Field(i)
				switch {
				case v.Kind() == reflect.String:
					v.SetString("{ \t\n")
				case v.Kind() == reflect.Int64 || v.Kind() == reflect.Int32:
					v.SetInt(' ') // a varint whose byte is a space
				case f.Type == reflect.TypeOf(json.RawMessage{}):
					v.SetBytes([]byte(`{}`))
				case f.Type == reflect.TypeOf([]string{}):
					v.Set(reflect.ValueOf([]string{"{"}))
				case f.Type == reflect.TypeOf([]schemas.DecisionDelivery{}):
					v.Set(reflect.ValueOf([]schemas.DecisionDelivery{{DeliveryID: "{"}}))
				default:
					t.Fatalf("no value for a field of type %s", f.Type)
				}
				b, err := schemas.Encode(binaryOf(t, r.Interface().(schemas.Record)))
				if err != nil {
					t.Fatal(err)
				}
				if strings.ContainsRune(" \t\n\r{", rune(b[0])) || schemas.IsJSON(b) {
					t.Fatalf("the value starts with %q: % x", b[0], b)
				}
			})
		}
	}
}

func TestDecodeRefusesBinaryRecordsThatBreakTheirSchema(t *testing.T) {
	mustEncode := func(r schemas.Record) []byte {
		b, err := schemas.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name string
		b    []byte
		into schemas.Record
		want error // nil: any error
	}{
		{"a request whose title is not UTF-8", mustEncode(&schemas.Request{Schema: schemas.RequestV2, Title: "bad \xff"}), &schemas.Request{}, schemas.ErrBinary},
		{"a request whose channel is not UTF-8", mustEncode(&schemas.Request{Schema: schemas.RequestV2, Channels: []string{"\xed\xa0\x80"}}), &schemas.Request{}, schemas.ErrBinary},
		{"a request whose payload is not JSON", mustEncode(&schemas.Request{Schema: schemas.RequestV2, Payload: json.RawMessage(`{"a":`)}), &schemas.Request{}, schemas.ErrBinary},
		{"a request whose key is two JSON values", mustEncode(&schemas.Request{Schema: schemas.RequestV2, Key: json.RawMessage(`1 2`)}), &schemas.Request{}, schemas.ErrBinary},
		{"a decision whose delivery's state is not UTF-8", mustEncode(&schemas.Decision{Schema: schemas.DecisionV2, Deliveries: []schemas.DecisionDelivery{{State: "\xff"}}}), &schemas.Decision{}, schemas.ErrBinary},
		{"a decision whose outcome is not UTF-8", mustEncode(&schemas.Decision{Schema: schemas.DecisionV2, Outcome: "\xfe"}), &schemas.Decision{}, schemas.ErrBinary},
		{"an accepted notification whose payload is not JSON", mustEncode(&schemas.Accepted{Schema: schemas.AcceptedV2, Payload: json.RawMessage(`nul`)}), &schemas.Accepted{}, schemas.ErrBinary},
		{"an accepted notification whose body is not UTF-8", mustEncode(&schemas.Accepted{Schema: schemas.AcceptedV2, Body: "\xc3"}), &schemas.Accepted{}, schemas.ErrBinary},
		{"a decision read as a request", mustEncode(&schemas.Decision{Schema: schemas.DecisionV2, RequestID: "r"}), &schemas.Request{}, schemas.ErrSchema},
		{"a request read as an accepted notification", mustEncode(&schemas.Request{Schema: schemas.RequestV2, Title: "t"}), &schemas.Accepted{}, schemas.ErrSchema},
		{"an accepted notification read as a decision", mustEncode(&schemas.Accepted{Schema: schemas.AcceptedV2, Title: "t"}), &schemas.Decision{}, schemas.ErrSchema},
		{"a herald.seen/v2 entry read as a request", seenV2Value(t), &schemas.Request{}, schemas.ErrSchema},
		{"a message without a schema", []byte{0x1a, 0x01, 'r'}, &schemas.Request{}, schemas.ErrSchema},
		{"a truncated request", mustEncode(&schemas.Request{Schema: schemas.RequestV2, Title: "title"})[:3], &schemas.Request{}, nil},
		{"bytes that are no message", []byte{0xff, 0xff, 0xff}, &schemas.Decision{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var dec schemas.Decoder
			for name, decode := range map[string]func([]byte, schemas.Record) error{
				"Decode": schemas.Decode, "Decoder.Decode": dec.Decode, "Decoder.DecodeShared": dec.DecodeShared,
			} {
				err := decode(c.b, c.into)
				if err == nil || c.want != nil && !errors.Is(err, c.want) {
					t.Fatalf("%s: got %v, want %v", name, err, c.want)
				}
			}
		})
	}
}

func TestABinaryRecordReadSharedPointsIntoItsBytesAndOtherwiseNot(t *testing.T) {
	r := &schemas.Request{Schema: schemas.RequestV2, RequestID: "request-1", Title: "a title", Payload: json.RawMessage(`{"n":1}`)}
	b, err := schemas.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	inside := func(s []byte) bool {
		p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
		start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		return p >= start && p < start+uintptr(len(b))
	}
	var dec schemas.Decoder
	var shared, copied, decoded schemas.Request
	if err := dec.DecodeShared(b, &shared); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(b, &copied); err != nil {
		t.Fatal(err)
	}
	if err := schemas.Decode(b, &decoded); err != nil {
		t.Fatal(err)
	}
	if !inside([]byte(shared.Title)) || !inside(shared.Payload) {
		t.Fatal("DecodeShared copied the request's strings")
	}
	for _, got := range []*schemas.Request{&copied, &decoded} {
		if inside(unsafe.Slice(unsafe.StringData(got.Title), len(got.Title))) || inside(got.Payload) {
			t.Fatal("Decode left the request pointing into the caller's bytes")
		}
	}
	clear(b)
	if copied.Title != "a title" || decoded.Title != "a title" || !bytes.Equal(decoded.Payload, []byte(`{"n":1}`)) {
		t.Fatalf("a copy changed with the caller's bytes: %+v %+v", copied, decoded)
	}
}

func TestEncodingABinaryRecordDoesNotAllocateWhenDstHasRoom(t *testing.T) {
	d := &schemas.Decision{Schema: schemas.DecisionV2, DecisionID: "dedupe/herald.requests/0/1", Stage: "dedupe", Outcome: "accepted", At: 1}
	a := &schemas.Accepted{Schema: schemas.AcceptedV2, NotificationID: "n", Channels: []string{"apns"}, Payload: json.RawMessage(`{}`)}
	var e schemas.Encoder
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		out, err := e.Append(buf[:0], d)
		if err != nil {
			t.Fatal(err)
		}
		if out, err = e.Append(out, a); err != nil || &out[0] != &buf[:1][0] {
			t.Fatal("the encoding did not go into dst", err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per decision and accepted record", allocs)
	}
}

func TestAWriterChoosesTheVersionByFormat(t *testing.T) {
	cases := []struct {
		flag                        string
		request, decision, accepted string
	}{
		{"v1", schemas.RequestV1, schemas.DecisionV1, schemas.AcceptedV1},
		{"v2", schemas.RequestV2, schemas.DecisionV2, schemas.AcceptedV2},
	}
	for _, c := range cases {
		t.Run("format "+c.flag, func(t *testing.T) {
			f, err := schemas.ParseFormat(c.flag)
			if err != nil {
				t.Fatal(err)
			}
			if f.RequestSchema() != c.request || f.DecisionSchema() != c.decision || f.AcceptedSchema() != c.accepted {
				t.Fatalf("format %s names %s, %s, %s", f, f.RequestSchema(), f.DecisionSchema(), f.AcceptedSchema())
			}
			r := schemas.Request{Schema: f.RequestSchema(), Title: "t"}
			b, err := schemas.Encode(r)
			if err != nil {
				t.Fatal(err)
			}
			if schemas.IsJSON(b) != (f == schemas.FormatJSON) || schemas.NameOf(r) != c.request || schemas.NameOf(&r) != c.request {
				t.Fatalf("format %s wrote % x named %s", f, b, schemas.NameOf(r))
			}
		})
	}
	t.Run("an unknown format is refused with its name", func(t *testing.T) {
		if _, err := schemas.ParseFormat("json"); err == nil || !strings.Contains(err.Error(), `"json"`) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestNameOfIsTheSchemaARecordIsWrittenAs(t *testing.T) {
	cases := []struct {
		name string
		r    schemas.Record
		want string
	}{
		{"a request pointer naming v2", &schemas.Request{Schema: schemas.RequestV2}, schemas.RequestV2},
		{"a request value naming v2", schemas.Request{Schema: schemas.RequestV2}, schemas.RequestV2},
		{"a decision pointer naming v2", &schemas.Decision{Schema: schemas.DecisionV2}, schemas.DecisionV2},
		{"a decision value naming v2", schemas.Decision{Schema: schemas.DecisionV2}, schemas.DecisionV2},
		{"an accepted pointer naming v2", &schemas.Accepted{Schema: schemas.AcceptedV2}, schemas.AcceptedV2},
		{"an accepted value naming v2", schemas.Accepted{Schema: schemas.AcceptedV2}, schemas.AcceptedV2},
		{"a decision without a Schema, by its type", &schemas.Decision{}, schemas.DecisionV1},
		{"a nil request, by its type", (*schemas.Request)(nil), schemas.RequestV1},
		{"a nil decision, by its type", (*schemas.Decision)(nil), schemas.DecisionV1},
		{"a nil accepted notification, by its type", (*schemas.Accepted)(nil), schemas.AcceptedV1},
		{"a record without a binary version, by its type", &schemas.Outcome{}, schemas.OutcomeV1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := schemas.NameOf(c.r); got != c.want {
				t.Fatalf("NameOf = %s, want %s", got, c.want)
			}
		})
	}
}

func TestAValueRecordIsEncodedAsItsPointerIs(t *testing.T) {
	for _, pair := range [][2]schemas.Record{
		{&schemas.Request{Schema: schemas.RequestV2, Title: "t"}, schemas.Request{Schema: schemas.RequestV2, Title: "t"}},
		{&schemas.Decision{Schema: schemas.DecisionV2, Outcome: "accepted"}, schemas.Decision{Schema: schemas.DecisionV2, Outcome: "accepted"}},
		{&schemas.Accepted{Schema: schemas.AcceptedV2, Body: "b"}, schemas.Accepted{Schema: schemas.AcceptedV2, Body: "b"}},
	} {
		t.Run(schemas.NameOf(pair[0]), func(t *testing.T) {
			byPointer, err := schemas.Encode(pair[0])
			if err != nil {
				t.Fatal(err)
			}
			byValue, err := schemas.Encode(pair[1])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(byPointer, byValue) || schemas.IsJSON(byValue) {
				t.Fatalf("by pointer % x, by value % x", byPointer, byValue)
			}
		})
	}
}

func TestARefusedSchemaNameIsQuotedOnlyWhenItReadsAsOne(t *testing.T) {
	cases := []struct {
		name, schema, want string
	}{
		{"another record's name is quoted", "herald.outcome/v1", `got "herald.outcome/v1"`},
		{"64 bytes of text are quoted", strings.Repeat("x", 64), `got "` + strings.Repeat("x", 64) + `"`},
		{"65 bytes are counted, not quoted", strings.Repeat("x", 65), "got 65 bytes that name no schema"},
		{"bytes that are not UTF-8 are counted, not quoted", "\xff\xfe", "got 2 bytes that name no schema"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A message of field 2 (schema) alone, holding c.schema.
			b := append([]byte{0x12, byte(len(c.schema))}, c.schema...)
			err := schemas.Decode(b, &schemas.Request{})
			if !errors.Is(err, schemas.ErrSchema) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an ErrSchema containing %q", err, c.want)
			}
		})
	}
}

// seenV2Value is a herald.seen/v2 entry: bytes in field 2, where records.proto
// keeps its schema name.
func seenV2Value(t *testing.T) []byte {
	t.Helper()
	b, err := schemas.AppendSeenV2(nil, &schemas.SeenEntry{Kind: schemas.SeenDedupe, Scope: "0123456789abcdef0123456789abcdef",
		NotificationID: "fedcba9876543210fedcba9876543210", RequestID: "r", Outcome: "accepted"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fill sets every field of v, recursively, to a value that is not its
// zero value.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x ✓")
	case reflect.Int32, reflect.Int64:
		v.SetInt(-7)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i))
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // raw JSON
			v.SetBytes([]byte(`{"k":[1,"x"]}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fill(s.Index(0))
		fill(s.Index(1))
		v.Set(s)
	default:
		panic("fill: no value for a " + v.Kind().String())
	}
}

// TestEveryFieldOfARecordHasAPlaceInItsBinaryVersion is the check on the
// Go types and records.proto kept in step: a field added to a record but
// not to its message (or to the code between them) is lost in v2, and
// this test then fails.
func TestEveryFieldOfARecordHasAPlaceInItsBinaryVersion(t *testing.T) {
	for _, r := range []schemas.Record{&schemas.Request{}, &schemas.Decision{}, &schemas.Accepted{}} {
		t.Run(reflect.TypeOf(r).Elem().Name()+" with every field set reads back whole", func(t *testing.T) {
			fill(reflect.ValueOf(r).Elem())
			r = binaryOf(t, r)
			b, err := schemas.Encode(r)
			if err != nil {
				t.Fatal(err)
			}
			got := reflect.New(reflect.TypeOf(r).Elem()).Interface().(schemas.Record)
			if err := schemas.Decode(b, got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, r) {
				t.Fatalf("read back\n%+v\nwant\n%+v", got, r)
			}
		})
	}
}
