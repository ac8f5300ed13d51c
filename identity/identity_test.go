package identity

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// Expected ids and canonical texts below were computed by the reference
// JavaScript function (testdata/canonical.js) on Node 20.

func TestNotificationID(t *testing.T) {
	tests := []struct {
		name      string
		typ       string
		recipient string
		key       Key
		canonical string
		id        string
	}{
		{
			name: "the design vector gives its documented id",
			typ:  "invoice.paid", recipient: "u_8831", key: Key{"invoice": String("inv_2201")},
			canonical: `{"t":"invoice.paid","r":"u_8831","k":{"invoice":"inv_2201"}}`,
			id:        "52f364d9288c640b306b566e509104bd",
		},
		{
			name: "an empty key is an empty object",
			typ:  "welcome", recipient: "u_1", key: Key{},
			canonical: `{"t":"welcome","r":"u_1","k":{}}`,
			id:        "6bc1fb6a4ef0de06b12d6ee6d0db90b8",
		},
		{
			name: "a nil key is an empty object",
			typ:  "welcome", recipient: "u_1", key: nil,
			canonical: `{"t":"welcome","r":"u_1","k":{}}`,
			id:        "6bc1fb6a4ef0de06b12d6ee6d0db90b8",
		},
		{
			name: "array-index names come first in numeric order, then the rest sorted",
			typ:  "t", recipient: "r",
			key: Key{
				"b": String("2"), "10": String("x"), "9": String("y"), "a": Number(1),
				"01": String("z"), "4294967295": String("w"), "4294967294": String("v"),
			},
			canonical: `{"t":"t","r":"r","k":{"9":"y","10":"x","4294967294":"v","01":"z","4294967295":"w","a":1,"b":"2"}}`,
			id:        "65ddb67081aad4821b2883fba2fb1b92",
		},
		{
			name: "names sort in UTF-16 order so astral characters precede high BMP ones",
			typ:  "t", recipient: "r",
			key:       Key{"\uff5e": Number(1), "😀": Number(2), "\ue000": Number(3)},
			canonical: "{\"t\":\"t\",\"r\":\"r\",\"k\":{\"😀\":2,\"\ue000\":3,\"\uff5e\":1}}",
			id:        "4a889681345f7b5a2f451e5ca4f60b2f",
		},
		{
			name: "strings escape only quotes, backslashes and control characters",
			typ:  "<b>&amp;</b>", recipient: "\u2028\u2029é😀",
			key:       Key{"q": String("\"\\/\b\f\n\r\t\x00\x1f\x7f")},
			canonical: "{\"t\":\"<b>&amp;</b>\",\"r\":\"\u2028\u2029é😀\",\"k\":{\"q\":\"\\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u001f\x7f\"}}",
			id:        "83930daaca01cff603f8906ab7488525",
		},
		{
			name: "lone surrogates are written as lower-case escapes",
			typ:  "t", recipient: "r",
			key:       Key{"s": String("\xed\xa0\x80x\xed\xb0\x80")},
			canonical: `{"t":"t","r":"r","k":{"s":"\ud800x\udc00"}}`,
			id:        "be9cde3fe91032feaa4c09297a4bd66b",
		},
		{
			name: "a surrogate pair spelled as two encoded halves is the astral character",
			typ:  "t", recipient: "r",
			key:       Key{"\xed\xa0\xbd\xed\xb8\x80": Number(2), "\uff5e": Number(1), "\ue000": Number(3)},
			canonical: "{\"t\":\"t\",\"r\":\"r\",\"k\":{\"😀\":2,\"\ue000\":3,\"\uff5e\":1}}",
			id:        "4a889681345f7b5a2f451e5ca4f60b2f",
		},
		{
			name: "numbers are written the JavaScript way",
			typ:  "t", recipient: "r",
			key: Key{
				"n": Number(1e21), "m": Number(1e-7), "z": Number(math.Copysign(0, -1)),
				"p": Number(0.30000000000000004), "x": Number(math.NaN()),
			},
			canonical: `{"t":"t","r":"r","k":{"m":1e-7,"n":1e+21,"p":0.30000000000000004,"x":null,"z":0}}`,
			id:        "244f5ca90c14a1418d7fd9efc547a54f",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			canon, err := CanonicalJSON(tt.typ, tt.recipient, tt.key)
			if err != nil {
				t.Fatal(err)
			}
			if string(canon) != tt.canonical {
				t.Errorf("CanonicalJSON = %q, want %q", canon, tt.canonical)
			}
			id, err := NotificationID(tt.typ, tt.recipient, tt.key)
			if err != nil {
				t.Fatal(err)
			}
			if id != tt.id {
				t.Errorf("NotificationID = %s, want %s", id, tt.id)
			}
			keyJSON, err := tt.key.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if id, err := NotificationIDOfCanonicalKey(tt.typ, tt.recipient, keyJSON); err != nil || id != tt.id {
				t.Errorf("NotificationIDOfCanonicalKey(its MarshalJSON) = %s, %v; want %s", id, err, tt.id)
			}
		})
	}
}

func TestNotificationIDRefusals(t *testing.T) {
	tests := []struct {
		name      string
		typ       string
		recipient string
		key       Key
		want      string
		is        error
	}{
		{"a type that is not UTF-8 is refused", "t\xff", "r", Key{}, "identity: type: byte 1", ErrInvalidString},
		{"a recipient that is not UTF-8 is refused", "t", "\xc3", Key{}, "identity: recipient: byte 0", ErrInvalidString},
		{"a key name that is not UTF-8 is refused", "t", "r", Key{"a\x80": String("v")}, `key name "a\x80"`, ErrInvalidString},
		{"a key value that is not UTF-8 is refused", "t", "r", Key{"a": String("\xed\x9f")}, `key "a": value`, ErrInvalidString},
		{"an overlong encoding is refused", "t", "r", Key{"a": String("\xc0\xaf")}, `key "a": value`, ErrInvalidString},
		{"a key named __proto__ is refused because JavaScript would drop it", "t", "r", Key{"__proto__": String("x")}, `"__proto__"`, errProto},
		{"a zero value is refused", "t", "r", Key{"a": {}}, `key "a": zero Value`, nil},
		{"two spellings of one JavaScript name are refused", "t", "r", Key{"😀": Number(1), "\xed\xa0\xbd\xed\xb8\x80": Number(2)}, "appears twice", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := NotificationID(tt.typ, tt.recipient, tt.key)
			if err == nil {
				t.Fatalf("NotificationID = %s, want an error", id)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q does not wrap %q", err, tt.is)
			}
			// A refused type or recipient is refused with the key's
			// canonical text too; a refused key has no canonical text.
			if keyJSON, err := tt.key.MarshalJSON(); err == nil {
				id, err := NotificationIDOfCanonicalKey(tt.typ, tt.recipient, keyJSON)
				if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, tt.is) {
					t.Errorf("NotificationIDOfCanonicalKey = %s, %v; want an error containing %q", id, err, tt.want)
				}
			}
		})
	}
}

func TestJSNumber(t *testing.T) {
	// Expectations are Node's JSON.stringify output.
	tests := []struct {
		f    float64
		want string
	}{
		{0, "0"}, {math.Copysign(0, -1), "0"}, {1, "1"}, {-1, "-1"}, {100, "100"},
		{1.5, "1.5"}, {-2.5, "-2.5"}, {0.1, "0.1"}, {0.30000000000000004, "0.30000000000000004"},
		{1e21, "1e+21"}, {-1e21, "-1e+21"}, {1e20, "100000000000000000000"},
		{123456789012345678901, "123456789012345680000"},
		{9.999999999999999e20, "999999999999999900000"},
		{1e-6, "0.000001"}, {1.5e-6, "0.0000015"}, {1e-7, "1e-7"}, {1.5e-7, "1.5e-7"},
		{-1.5e-7, "-1.5e-7"}, {0.000001234, "0.000001234"},
		{5e-324, "5e-324"}, {-5e-324, "-5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"}, {0x1p-1022, "2.2250738585072014e-308"},
		{1 << 53, "9007199254740992"}, {1<<53 + 2, "9007199254740994"},
		{1e300, "1e+300"}, {123e-20, "1.23e-18"}, {4294967295, "4294967295"},
		{1.0 / 3, "0.3333333333333333"}, {12345678.9, "12345678.9"},
		{math.NaN(), "null"}, {math.Inf(1), "null"}, {math.Inf(-1), "null"},
	}
	for _, tt := range tests {
		t.Run("formats "+tt.want, func(t *testing.T) {
			if got := string(appendJSNumber(nil, tt.f)); got != tt.want {
				t.Errorf("appendJSNumber(%v) = %s, want %s", tt.f, got, tt.want)
			}
		})
	}
}

func TestParseKey(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Key
	}{
		{"an empty object is an empty key", ` { } `, Key{}},
		{"strings and numbers are read", `{"invoice":"inv_2201","n":12}`, Key{"invoice": String("inv_2201"), "n": Number(12)}},
		{"1.0 is the number 1", `{"n":1.0}`, Key{"n": Number(1)}},
		{"exponents are read", `{"a":1E3,"b":-2.5e-1,"c":1e+21}`, Key{"a": Number(1000), "b": Number(-0.25), "c": Number(1e21)}},
		{"numbers round to the nearest float64", `{"n":0.30000000000000004441}`, Key{"n": Number(0.30000000000000004)}},
		{"underflow is zero as in JavaScript", `{"n":1e-400}`, Key{"n": Number(0)}},
		{"a later duplicate wins", `{"a":"1","a":2}`, Key{"a": Number(2)}},
		{"escapes are decoded", `{"\u0061\n":"\"\\\/\b\f\r\t\u00e9"}`, Key{"a\n": String("\"\\/\b\f\r\té")}},
		{"an escaped surrogate pair is one character", `{"s":"\ud83d\ude00"}`, Key{"s": String("😀")}},
		{"a lone surrogate escape is kept encoded", `{"s":"\uD800x"}`, Key{"s": String("\xed\xa0\x80x")}},
		{"raw UTF-8 is kept", "{\"é\":\"\u2028😀\"}", Key{"é": String("\u2028😀")}},
		{"whitespace is allowed between tokens", "\t{\r\n\"a\" : 1 ,\"b\":\"c\"\n}\n", Key{"a": Number(1), "b": String("c")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKey(tt.text)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("ParseKey = %#v, want %#v", got, tt.want)
			}
			for name, v := range tt.want {
				if g, ok := got[name]; !ok || g != v {
					t.Errorf("ParseKey = %#v, want %#v", got, tt.want)
				}
			}
		})
	}
}

func TestParseKeyErrors(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string
	}{
		{"a nested object names its member", `{"a":1,"inv":{"x":1}}`, `member "inv" is an object`},
		{"an array names its member", `{"items":[1]}`, `member "items" is an array`},
		{"a boolean names its member", `{"paid":true}`, `member "paid" is a boolean`},
		{"null names its member", `{"n":null}`, `member "n" is null`},
		{"a number beyond float64 names its member", `{"big":1e400}`, `member "big": number 1e400 is beyond float64's range`},
		{"__proto__ is refused", `{"__proto__":"x"}`, `"__proto__"`},
		{"an array is not a key", `["a"]`, "want a JSON object"},
		{"empty text is not a key", ``, "want a JSON object"},
		{"trailing text is refused", `{} x`, "unexpected text"},
		{"a trailing comma is refused", `{"a":1,}`, "want a member name"},
		{"a leading zero is refused", `{"a":01}`, `want ',' or '}' after member "a"`},
		{"a bare decimal point is refused", `{"a":1.}`, "malformed number"},
		{"a plus sign is refused", `{"a":+1}`, `member "a": want a value`},
		{"an unterminated string is refused", `{"a":"b`, "unterminated string"},
		{"a raw control character is refused", "{\"a\":\"\n\"}", "control character U+000A"},
		{"an unknown escape is refused", `{"a":"\x"}`, `unknown escape \x`},
		{"a short unicode escape is refused", `{"a":"\u12"}`, "escape"},
		{"invalid UTF-8 is refused", "{\"a\":\"\xff\"}", "not valid UTF-8"},
		{"single quotes are refused", `{'a':1}`, "want a member name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := ParseKey(tt.text)
			if err == nil {
				t.Fatalf("ParseKey(%q) = %#v, want an error", tt.text, k)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestKeyJSON(t *testing.T) {
	t.Run("a key marshals to its canonical form and back", func(t *testing.T) {
		in := Key{"b": String("<&>\u2028"), "10": Number(1e21), "9": Number(-0.5), "s": String("\xed\xa0\x80")}
		b, err := json.Marshal(struct{ K Key }{in})
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ K Key }
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		want, _ := NotificationID("t", "r", in)
		got, _ := NotificationID("t", "r", out.K)
		if got != want {
			t.Errorf("key %#v came back as %#v (json %s)", in, out.K, b)
		}
	})
	t.Run("a nil key marshals as an empty object", func(t *testing.T) {
		b, err := Key(nil).MarshalJSON()
		if err != nil || string(b) != "{}" {
			t.Errorf("MarshalJSON = %s, %v; want {}", b, err)
		}
	})
	t.Run("json null leaves the key alone", func(t *testing.T) {
		k := Key{"a": Number(1)}
		if err := json.Unmarshal([]byte("null"), &k); err != nil || len(k) != 1 {
			t.Errorf("Unmarshal(null) = %#v, %v", k, err)
		}
	})
	t.Run("a key with a nested object does not unmarshal", func(t *testing.T) {
		var k Key
		if err := json.Unmarshal([]byte(`{"a":{}}`), &k); err == nil {
			t.Errorf("Unmarshal = %#v, want an error", k)
		}
	})
}

func TestDerivedIDs(t *testing.T) {
	// Vectors computed independently (Python hashlib) from the documented
	// byte format.
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"a dedupe id is derived from tenant, type, recipient and key", DedupeID("acme", "invoice.paid", "u_8831", "dk-1"), "d260c84390686d426cb7afb20052480f"},
		{"a dedupe id of empty fields is still defined", DedupeID("", "", "", ""), "b889734a8ee6b174db54206376edb207"},
		{"a dedupe id hashes the UTF-8 bytes", DedupeID("tenant-é", "t", "r", "k\u2028"), "df427a5b4b726ae52f320473f48c2ed1"},
		{"an idempotency id is derived from tenant, type, recipient and key", IdempotencyID("acme", "invoice.paid", "u_8831", "ik-1"), "bc028f72eb509950f274e50ea45f1c39"},
		{"a delivery id is derived from notification and device", DeliveryID("52f364d9288c640b306b566e509104bd", "dev-1"), "4eb160981ce0a5e34585008dc860b5ec"},
		{"an occurrence id is derived from notification id and acceptance time", OccurrenceID("52f364d9288c640b306b566e509104bd", 1764547200000), "c93c32e54caa0ba8e7a138709607f846"},
		{"a receipt id is derived from delivery and kind", ReceiptID("4eb160981ce0a5e34585008dc860b5ec", "displayed"), "f2e2a50abd2af5c6e9e71c6fb95ee5b8"},
		{"a webhook event id is derived from delivery and event type", WebhookEventID("4eb160981ce0a5e34585008dc860b5ec", "delivery.failed"), "7840cec06bd0b042c658185c62071a2f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %s, want %s", tt.got, tt.want)
			}
		})
	}
	t.Run("field boundaries matter", func(t *testing.T) {
		if DedupeID("ab", "c", "r", "k") == DedupeID("a", "bc", "r", "k") {
			t.Error("moving a byte between fields kept the id")
		}
	})
	t.Run("a notification accepted again later is another occurrence", func(t *testing.T) {
		if OccurrenceID("52f364d9288c640b306b566e509104bd", 1) == OccurrenceID("52f364d9288c640b306b566e509104bd", 2) {
			t.Error("two acceptance times gave one occurrence id")
		}
	})
	t.Run("dedupe and idempotency keys live in separate domains", func(t *testing.T) {
		if DedupeID("t", "ty", "r", "k") == IdempotencyID("t", "ty", "r", "k") {
			t.Error("the same key gave the same dedupe and idempotency id")
		}
	})
}

func TestNewRandomID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewRandomID()
		if !Valid(id) {
			t.Fatalf("NewRandomID = %q, not a valid id", id)
		}
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("NewRandomID = %q: not an RFC 9562 UUIDv7 (%v)", id, err)
		}
		if seen[id] {
			t.Fatalf("NewRandomID repeated %s", id)
		}
		seen[id] = true
	}
}

func TestProviderIDs(t *testing.T) {
	const id = "52f364d9288c640b306b566e509104bd"
	t.Run("the apns-id is the UUIDv5 of the notification id", func(t *testing.T) {
		// Python: uuid.uuid5(uuid.NAMESPACE_URL, "herald:notification:" + id)
		if got, want := APNsID(id), "5abd7843-96f6-5b56-9032-3d822d8d1e0d"; got != want {
			t.Errorf("APNsID = %s, want %s", got, want)
		}
	})
	t.Run("the apns collapse id and fcm collapse key are the id", func(t *testing.T) {
		a, err1 := APNsCollapseID(id)
		f, err2 := FCMCollapseKey(id)
		if a != id || f != id || err1 != nil || err2 != nil {
			t.Errorf("APNsCollapseID = %q, %v; FCMCollapseKey = %q, %v", a, err1, f, err2)
		}
	})
	t.Run("the web push topic is the id's bytes in base64url", func(t *testing.T) {
		got, err := WebPushTopic(id)
		if err != nil || got != "UvNk2SiMZAswa1ZuUJEEvQ" {
			t.Errorf("WebPushTopic = %q, %v; want UvNk2SiMZAswa1ZuUJEEvQ", got, err)
		}
	})
	for _, bad := range []string{"", "52F364D9288C640B306B566E509104BD", id + "0", "zz" + id[2:]} {
		t.Run("collapse ids refuse "+strings.TrimSpace(bad+" "), func(t *testing.T) {
			for name, f := range map[string]func(string) (string, error){
				"APNsCollapseID": APNsCollapseID, "FCMCollapseKey": FCMCollapseKey, "WebPushTopic": WebPushTopic,
			} {
				if got, err := f(bad); !errors.Is(err, ErrInvalidID) {
					t.Errorf("%s(%q) = %q, %v; want ErrInvalidID", name, bad, got, err)
				}
			}
		})
	}
}

func TestValid(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"52f364d9288c640b306b566e509104bd", true},
		{"00000000000000000000000000000000", true},
		{"52F364D9288C640B306B566E509104BD", false},
		{"52f364d9288c640b306b566e509104b", false},
		{"52f364d9288c640b306b566e509104bd0", false},
		{"52f364d9-288c-640b-306b-566e509104bd", false},
		{"52f364d9288c640b306b566e509104bg", false},
		{"", false},
	}
	for _, tt := range tests {
		name := "accepts " + tt.id
		if !tt.want {
			name = "rejects " + tt.id
		}
		t.Run(name, func(t *testing.T) {
			if got := Valid(tt.id); got != tt.want {
				t.Errorf("Valid(%q) = %v", tt.id, got)
			}
		})
	}
}

func BenchmarkNotificationID(b *testing.B) {
	key := Key{"invoice": String("inv_2201"), "attempt": Number(3), "région": String("île-de-france")}
	for b.Loop() {
		if _, err := NotificationID("invoice.paid", "u_8831", key); err != nil {
			b.Fatal(err)
		}
	}
}
