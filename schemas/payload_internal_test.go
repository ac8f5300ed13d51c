package schemas

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// referenceCompact is compactJSON as herald computed it until appendCanonical:
// the payload decoded into any with json.Number, every number replaced by
// canonicalNumber's text, marshalled again by encoding/json. Seen-sets
// hold hashes of this text.
func referenceCompact(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || !json.Valid(raw) {
		return json.RawMessage("null")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return json.RawMessage("null")
	}
	var canon func(v any) any
	canon = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			return canonicalNumber(string(x))
		case map[string]any:
			for k, e := range x {
				x[k] = canon(e)
			}
		case []any:
			for i, e := range x {
				x[i] = canon(e)
			}
		}
		return v
	}
	b, err := json.Marshal(canon(v))
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// payloadCases are documents whose canonical text is easy to get wrong.
var payloadCases = []string{
	``, `null`, `true`, `false`, `0`, `-0`, `-0.0`, `7`, `-7`, `007`, `1.50`, `1e21`, `123456789012345`, `1234567890123456`,
	`9007199254740993`, `-9007199254740993`, `1E400`, `0.10000000000000000001`,
	`"plain"`, `"<b>&amp;</b>"`, `"quote \" backslash \\ slash \/"`, `"\u00e9\u2028\u2029"`, "\"raw \u2028 line\"", `"\ud83d\ude00"`,
	`"\ud800 lone"`, `"\udc00\ud800"`, "\"bad \xff utf-8\"", `"\b\f\n\r\t\u0001\u007f"`, "\"ünïcødé ✓ 😀\"",
	`[]`, `{}`, ` [ 1 , "a" , [ ] , { } ] `, `{"b":1,"a":2}`, `{"a":1,"a":2}`, `{"a":{"z":1,"y":[3,{"d":1,"c":2}]},"A":0}`,
	`{"k":1,"k":{"x":1},"j":2,"k":3}`, `{"\u0061":1,"a":2}`, `{"é":1,"e":2,"\u00e9":3}`, `{"<":1,"&":2,">":3}`,
	`{"":0," ":1}`, `{"a\"b":1,"a":2}`, `{"n":12345678901234567890123e-3,"m":1.0,"o":-1e-400}`,
	"{\"bad\xffkey\":1,\"x\":\"bad\xfe\"}", `[1,2,3` /* invalid: null */, `{"a":1} {}` /* trailing data: null */, `{"a":01}`,
	"\t{\n\"a\" :\r[ true ,false,null ] }\n", `1e+5`, `-1E+400`, `"<"`, `">"`, `"&"`, `{">":1,"<":2}`,
}

func TestPlainTokensAreThoseWhoseTextIsCanonical(t *testing.T) {
	strs := []struct {
		tok   string
		plain bool
	}{
		{`""`, true}, {`"plain text ~ !#$%'()*+,-./:;=?@[]^_{|}"`, true},
		{`" "`, true}, {`"~"`, true},
		{`"<"`, false}, {`">"`, false}, {`"&"`, false}, {`"\\"`, false}, {`"\""`, false}, {`"\n"`, false},
		{"\"\x1f\"", false}, {"\"\x7f\"", false}, {`"é"`, false}, {"\"\xff\"", false},
	}
	for _, c := range strs {
		t.Run(fmt.Sprintf("the string %q is plain: %v", c.tok, c.plain), func(t *testing.T) {
			if got := plainString([]byte(c.tok)); got != c.plain {
				t.Fatalf("plainString(%q) = %v", c.tok, got)
			}
		})
	}
	nums := []struct {
		num   string
		plain bool
	}{
		{"0", true}, {"7", true}, {"-7", true}, {"123456789012345", true}, {"-123456789012345", true}, {"9", true},
		{"-0", false}, {"1234567890123456", false}, {"1.5", false}, {"1e5", false}, {"10E2", false}, {"-", false}, {"", false},
	}
	for _, c := range nums {
		t.Run(fmt.Sprintf("the number %q is plain: %v", c.num, c.plain), func(t *testing.T) {
			if got := plainNumber([]byte(c.num)); got != c.plain {
				t.Fatalf("plainNumber(%q) = %v", c.num, got)
			}
		})
	}
}

func TestCanonicalPayloadIsEncodingJSONs(t *testing.T) {
	for _, c := range payloadCases {
		t.Run("the canonical text of "+strings.ToValidUTF8(c, "?")+" is encoding/json's", func(t *testing.T) {
			if got, want := string(compactJSON(json.RawMessage(c))), string(referenceCompact(json.RawMessage(c))); got != want {
				t.Fatalf("compactJSON(%q) = %s, want %s", c, got, want)
			}
		})
	}
	t.Run("a request's content hash is the one encoding/json's text gives", func(t *testing.T) {
		for _, c := range payloadCases {
			for _, title := range []string{"Shipped", "back\bfeed\f", `the text \u0008 and \u000c, not the characters`} {
				r := Request{Type: "order.shipped", Recipient: "u<1>", Title: title, Body: "On its way & more", Channels: []string{"apns"}, Payload: json.RawMessage(c)}
				content := requestContent{r.Type, r.Recipient, r.DedupeKey, r.Title, r.Body, referenceCompact(r.Payload), r.Locale, r.Channels, r.TargetDevice}
				b, _ := json.Marshal(content)
				if got, want := r.ContentSum(), sha256.Sum256(b); got != want {
					t.Fatalf("ContentSum of a request with title %q and payload %q differs from encoding/json's", title, c)
				}
			}
		}
	})
}

// FuzzCanonicalPayload checks compactJSON against the decode-and-marshal
// it replaces on any input:
//
//	go test -run '^$' -fuzz FuzzCanonicalPayload -fuzztime 2m ./schemas
func FuzzCanonicalPayload(f *testing.F) {
	for _, c := range payloadCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if got, want := compactJSON(raw), referenceCompact(raw); !bytes.Equal(got, want) {
			t.Fatalf("compactJSON(%q) = %s, want %s", raw, got, want)
		}
	})
}

// TestCanonicalPayloadOfRandomDocumentsIsEncodingJSONs compares compactJSON
// with the decode-and-marshal it replaces on generated documents: nested
// objects and arrays, repeated and escaped keys, awkward strings, numbers
// in every spelling, random white space.
func TestCanonicalPayloadOfRandomDocumentsIsEncodingJSONs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	strs := []string{`"a"`, `"b"`, `"\u0061"`, `"é"`, `"\u00e9"`, `"<&>"`, `"\""`, `"\\"`, `"\/"`, `"\b\f"`, `"\ud83d\ude00"`, `"\ud800"`,
		"\"\xff\"", "\"\u2028\"", `""`, `" "`, `"Z"`, `"zz"`}
	nums := []string{`0`, `-0`, `1`, `-1`, `10`, `1.0`, `1.5e3`, `-2.25E-2`, `123456789012345`, `1234567890123456`, `9007199254740993`,
		`1e400`, `1e-400`, `0.1`, `100e-2`, `3.14159265358979323846`}
	ws := func() string { return []string{"", " ", "\n", "\t ", "\r\n"}[rng.IntN(5)] }
	var value func(depth int) string
	// compound writes up to four items between open and close.
	compound := func(open, close string, item func() string) string {
		var b strings.Builder
		b.WriteString(open + ws())
		for i := range rng.IntN(5) {
			if i > 0 {
				b.WriteString("," + ws())
			}
			b.WriteString(item() + ws())
		}
		return b.String() + close
	}
	value = func(depth int) string {
		switch k := rng.IntN(10); {
		case k < 2 && depth < 4:
			return compound("{", "}", func() string { return strs[rng.IntN(len(strs))] + ws() + ":" + ws() + value(depth+1) })
		case k < 4 && depth < 4:
			return compound("[", "]", func() string { return value(depth + 1) })
		case k < 6:
			return strs[rng.IntN(len(strs))]
		case k < 9:
			return nums[rng.IntN(len(nums))]
		default:
			return []string{"true", "false", "null"}[rng.IntN(3)]
		}
	}
	for range 20000 {
		doc := ws() + value(0) + ws()
		if got, want := string(compactJSON(json.RawMessage(doc))), string(referenceCompact(json.RawMessage(doc))); got != want {
			t.Fatalf("compactJSON(%q) = %s, want %s", doc, got, want)
		}
	}
}
