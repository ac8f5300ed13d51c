package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// bodies are documents on either side of readJSON's rules.
var bodies = []string{
	`{"a":1}`, " {\"a\":1}\n", `{"a":1,"a":2}`, `{"x":{"a":1,"a":2}}`, `[{"a":1},{"a":1}]`, `{"a":[1,{"b":2,"b":3}]}`,
	`{"a":"\ud800"}`, `{"a":"\udc00"}`, `{"a":"\ud800x"}`, `{"a":"\ud800\u0041"}`, `{"a":"\ud83d\ude00"}`, `{"\ud800":1}`,
	`{"a":"\\ud800"}`, `{"a":"\\\ud800"}`, `{"a":1} {}`, `{"a":1}x`, `{"a":"\uFFFF"}`, `{"a":"\u0000"}`, `{"a":01}`,
	`{"a":1.5e+300}`, `{"a":-0}`, `{"é":1,"\u00e9":2}`, `{"a":1,"A":2}`, `{"a":"é","\u00e9":1}`, `{`, `}`, `[`, `{"a":}`,
	`{"a" 1}`, `{"a":1,}`, `[1,]`, `"just a string"`, `null`, `true`, `12`, `{"a":tru}`, `{"a":"\x"}`, `{"a":"` + "\t" + `"}`,
	`{"a":[[[[[[[[[[1]]]]]]]]]]}`, strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"type":"t","recipients":["u1","u2"],"title":"x","body":"b","payload":{"k":[1,2,{"z":null}]}}`,
}

// TestTheFastBodyCheckAcceptsOnlyWhatTheWalkAccepts: checkJSON's one-pass
// check may refuse a body the token walk would accept (the walk then
// decides), never accept one the walk refuses.
func TestTheFastBodyCheckAcceptsOnlyWhatTheWalkAccepts(t *testing.T) {
	for _, b := range bodies {
		fast := jsontext.Value(b).IsValid()
		walk := checkJSONTokens([]byte(b))
		if fast && walk != nil {
			t.Errorf("%.60q: the fast check accepts what the walk refuses (%s)", b, walk.Detail)
		}
		if got := checkJSON([]byte(b)); (got == nil) != (walk == nil) || got != nil && got.Detail != walk.Detail {
			t.Errorf("%.60q: checkJSON answers %v, the walk %v", b, got, walk)
		}
	}
	// The check must not be vacuous: it accepts the valid bodies and
	// refuses the others, as the walk does, on this list.
	for _, c := range []struct {
		body string
		ok   bool
	}{{`{"a":1}`, true}, {`{"a":1,"a":2}`, false}, {`{"a":"\ud800"}`, false}, {`{"a":1} {}`, false}} {
		if got := jsontext.Value(c.body).IsValid(); got != c.ok {
			t.Errorf("%q: fast check %v, want %v", c.body, got, c.ok)
		}
	}
}

func FuzzTheFastBodyCheckAcceptsOnlyWhatTheWalkAccepts(f *testing.F) {
	for _, b := range bodies {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b string) {
		if !utf8.ValidString(b) { // readJSON refuses it before checkJSON
			return
		}
		if jsontext.Value(b).IsValid() {
			if p := checkJSONTokens([]byte(b)); p != nil {
				t.Fatalf("%q: the fast check accepts what the walk refuses (%s)", b, p.Detail)
			}
		}
	})
}

// BenchmarkCheckJSON checks a typical send's body with the fast check
// (checkJSON) and with the token walk alone, side by side.
//
//	go test -run '^$' -bench CheckJSON -benchmem ./api
func BenchmarkCheckJSON(b *testing.B) {
	body := []byte(`{"type":"bench.load","recipientId":"u42","title":"t","body":"b","key":{"run":"clients=256","n":123456}}`)
	for _, c := range []struct {
		name  string
		check func([]byte) *problem
	}{{"fast", checkJSON}, {"walk", checkJSONTokens}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if p := c.check(body); p != nil {
					b.Fatal(p.Detail)
				}
			}
		})
	}
}

// BenchmarkParseSend reads a typical send's body into its requests and
// their records, as POST /v1/notifications does before it writes them:
// the body check, the field decoding, the ids and the encoding.
//
//	go test -run '^$' -bench ParseSend -benchmem ./api
func BenchmarkParseSend(b *testing.B) {
	body := []byte(`{"type":"bench.load","recipientId":"u42","title":"t","body":"b","key":{"run":"clients=256","n":123456}}`)
	s := &Server{cfg: Config{MaxRecipients: 1000, Now: time.Now}, requestsT: "requests"}
	r := httptest.NewRequest(http.MethodPost, "/v1/notifications", nil)
	p := principal{tenant: "bench", name: "load"}
	b.ReportAllocs()
	for range b.N {
		if prob := checkJSON(body); prob != nil {
			b.Fatal(prob.Detail)
		}
		snd, prob := s.parseSend(body, r, p)
		if prob != nil {
			b.Fatal(prob.Detail)
		}
		now := s.cfg.Now()
		reqs, prob := s.requests(snd, p, now)
		if prob != nil {
			b.Fatal(prob.Detail)
		}
		if _, err := s.requestRecord(reqs[0], "", now, false); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFieldsReadMembersAsTheirText(t *testing.T) {
	t.Run("a string is read as its text, escapes decoded", func(t *testing.T) {
		for body, want := range map[string]string{
			`{"a":"plain"}`:                   "plain",
			` { "a" : "spaced" } `:            "spaced",
			`{"a":"\u00e9\n\"q\"\\\/"}`:       "é\n\"q\"\\/",
			`{"a":"\ud83d\ude00 and é"}`:      "😀 and é",
			`{"\u0061":"an escaped name"}`:    "an escaped name",
			`{"b":{"a":"x"},"a":"after one"}`: "after one",
		} {
			f := newFields([]byte(body), "")
			got, ok := f.str("a")
			if !ok || got != want || len(*f.typeErrs) > 0 {
				t.Errorf("%s: read %q, %v (errors %v), want %q", body, got, ok, *f.typeErrs, want)
			}
		}
	})
	t.Run("a member of another type is a type error naming it", func(t *testing.T) {
		for _, body := range []string{`{"a":7}`, `{"a":null}`, `{"a":["x"]}`, `{"a":{"b":"x"}}`, `{"a":true}`} {
			f := newFields([]byte(body), "p")
			if _, ok := f.str("a"); ok || len(*f.typeErrs) != 1 || (*f.typeErrs)[0].Field != "p.a" {
				t.Errorf("%s: ok %v, errors %v; want one naming p.a", body, ok, *f.typeErrs)
			}
		}
	})
	t.Run("only an object has members", func(t *testing.T) {
		for body, want := range map[string]int{`{}`: 0, `{"a":1,"b":[1,{"c":2}]}`: 2, `[1]`: -1, `"s"`: -1, `null`: -1, `1`: -1} {
			f := newFields([]byte(body), "")
			if got := len(f.members); (f.members == nil) != (want < 0) || want >= 0 && got != want {
				t.Errorf("%s: %d members (nil %v), want %d", body, got, f.members == nil, want)
			}
		}
	})
	t.Run("a member's value is its raw JSON", func(t *testing.T) {
		f := newFields([]byte(`{"a" : {"b": [1, "x"]} ,"c":2}`), "")
		if raw, ok := f.get("a"); !ok || string(raw) != `{"b": [1, "x"]}` {
			t.Errorf("a is %s, %v", raw, ok)
		}
	})
	t.Run("an array of strings is read item by item", func(t *testing.T) {
		for _, c := range []struct {
			body   string
			want   []string
			errors []string
		}{
			{`{"a":["x","\u0079"]}`, []string{"x", "y"}, nil},
			{`{"a":[]}`, []string{}, nil},
			{`{"a":[1,"z",null]}`, []string{"", "z", ""}, []string{"a[0]", "a[2]"}},
			{`{"a":"x"}`, nil, []string{"a"}},
			{`{"a":{"x":"y"}}`, nil, []string{"a"}},
		} {
			f := newFields([]byte(c.body), "")
			got, ok := f.strings("a")
			var fields []string
			for _, e := range *f.typeErrs {
				fields = append(fields, e.Field)
			}
			if ok != (c.errors == nil) || !slices.Equal(got, c.want) || (got == nil) != (c.want == nil) || !slices.Equal(fields, c.errors) {
				t.Errorf("%s: %q, %v, errors %v; want %q, errors %v", c.body, got, ok, fields, c.want, c.errors)
			}
		}
	})
	t.Run("members no accessor asked for are unknown, by name", func(t *testing.T) {
		f := newFields([]byte(`{"z":1,"a":2,"m":3}`), "t")
		f.get("m")
		f.unknown()
		var fields []string
		for _, e := range *f.typeErrs {
			fields = append(fields, e.Field)
		}
		if !slices.Equal(fields, []string{"t.a", "t.z"}) || !f.asked("m") || f.asked("a") {
			t.Errorf("unknown fields %v, want [t.a t.z]", fields)
		}
	})
}

// FuzzFieldsReadAsEncodingJSONDoes holds fields, which splits members with
// jsontext and reads strings without reflection, to what encoding/json
// reads from the same checked body: the same members with the same raw
// values, and each string member the same text.
func FuzzFieldsReadAsEncodingJSONDoes(f *testing.F) {
	for _, b := range bodies {
		f.Add(b)
	}
	f.Add(`{"type":"t","title":"caf\u00e9 \"x\" \\ \/ \n","body":"\ud83d\ude00","recipients":["a","b\u0062"]}`)
	f.Fuzz(func(t *testing.T, body string) {
		if !utf8.ValidString(body) || checkJSON([]byte(body)) != nil {
			return // readJSON refuses it before fields reads it
		}
		var want map[string]json.RawMessage
		isObject := json.Unmarshal([]byte(body), &want) == nil && want != nil
		fl := newFields([]byte(body), "")
		if (fl.members != nil) != isObject {
			t.Fatalf("%q: fields sees an object %v, encoding/json %v", body, fl.members != nil, isObject)
		}
		if !isObject {
			return
		}
		if len(fl.members) != len(want) {
			t.Fatalf("%q: %d members, encoding/json %d", body, len(fl.members), len(want))
		}
		for name, raw := range want {
			got, ok := fl.get(name)
			if !ok || !bytes.Equal(got, bytes.TrimSpace(raw)) {
				t.Fatalf("%q: member %q is %q, %v; encoding/json %q", body, name, got, ok, raw)
			}
			var s string
			isString := raw[0] == '"' && json.Unmarshal(raw, &s) == nil
			gs, ok := newFields([]byte(body), "").str(name)
			if ok != isString || gs != s {
				t.Fatalf("%q: member %q reads as %q, %v; encoding/json %q, %v", body, name, gs, ok, s, isString)
			}
		}
	})
}
