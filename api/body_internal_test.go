package api

import (
	"strings"
	"testing"
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
