package schemas_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/heraldhq/herald/schemas"
)

// legacyContentHash is ContentHash as herald computed it before numbers were
// kept exact (payload decoded into any, so numbers became float64): the
// hashes stored in seen-sets written by earlier versions.
func legacyContentHash(r schemas.Request) string {
	payload := json.RawMessage("null")
	if len(r.Payload) > 0 {
		var v any
		if err := json.Unmarshal(r.Payload, &v); err == nil {
			payload, _ = json.Marshal(v)
		}
	}
	content := struct {
		Type      string          `json:"type"`
		Recipient string          `json:"recipient"`
		DedupeKey string          `json:"dedupeKey"`
		Title     string          `json:"title"`
		Body      string          `json:"body"`
		Payload   json.RawMessage `json:"payload"`
		Locale    string          `json:"locale"`
		Channels  []string        `json:"channels"`
		Device    string          `json:"targetDevice,omitempty"`
	}{r.Type, r.Recipient, r.DedupeKey, r.Title, r.Body, payload, r.Locale, r.Channels, r.TargetDevice}
	b, _ := json.Marshal(content)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func withPayload(p string) schemas.Request {
	return schemas.Request{Type: "order.shipped", Recipient: "u_1", Title: "Shipped", Body: "On its way",
		Channels: []string{"apns"}, Payload: json.RawMessage(p)}
}

func TestContentHashTellsApartNumbersThatFloat64Cannot(t *testing.T) {
	cases := []struct{ name, a, b string }{
		{"integers one apart above 2^53 differ", `{"orderId":9007199254740993}`, `{"orderId":9007199254740992}`},
		{"long decimals that round to one float64 differ", `{"amount":0.10000000000000000001}`, `{"amount":0.1}`},
		{"negative integers one apart above 2^53 differ", `{"n":-9007199254740993}`, `{"n":-9007199254740992}`},
		{"a payload-only change differs", `{"orderId":1}`, `{"orderId":2}`},
		{"a number beyond float64's range is not null", `{"n":1e400}`, `null`},
		{"two numbers beyond float64's range differ", `{"n":1e400}`, `{"n":2e400}`},
		{"a number below float64's smallest is not zero", `{"n":1e-400}`, `{"n":0}`},
		{"an integer of 70 digits is not one a digit larger", `{"n":1234567890123456789012345678901234567890123456789012345678901234567890}`,
			`{"n":1234567890123456789012345678901234567890123456789012345678901234567891}`},
		{"nested numbers count too", `{"items":[{"sku":18014398509481985}]}`, `{"items":[{"sku":18014398509481984}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if withPayload(c.a).ContentHash() == withPayload(c.b).ContentHash() {
				t.Fatalf("%s and %s hash alike: a changed body would be answered as a replay", c.a, c.b)
			}
		})
	}
}

func TestContentHashIsOnePerNumericValue(t *testing.T) {
	cases := []struct{ name, a, b string }{
		{"a trailing fraction of zeros is the same integer", `{"n":9007199254740993.000}`, `{"n":9007199254740993}`},
		{"an exponent is the same integer", `{"n":9.007199254740993e15}`, `{"n":9007199254740993}`},
		{"a large exact number in two spellings", `{"n":12345678901234567890123e-3}`, `{"n":12345678901234567890.123}`},
		{"small numbers in two spellings", `{"n":1.50}`, `{"n":15e-1}`},
		{"key order and white space are not content", `{"a":9007199254740993, "b":[1,2]}`, `{ "b":[1,2],"a":9007199254740993}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if withPayload(c.a).ContentHash() != withPayload(c.b).ContentHash() {
				t.Fatalf("%s and %s hash differently", c.a, c.b)
			}
		})
	}
}

// Seen-set entries written before this change hold legacy hashes: every
// payload whose numbers a float64 holds exactly must hash as before, or a
// retry within the TTL would be a conflict.
func TestContentHashOfPayloadsFloat64HoldsIsTheStoredOne(t *testing.T) {
	payloads := []string{
		``,
		`{}`,
		`{"invoice":"inv_2201","amount":1999,"currency":"EUR"}`,
		`{"a":0.1,"b":-2.5,"c":1e21,"d":1e-7,"e":100000000000000000000000,"f":-0,"g":0.000001,"h":123456789012345680000}`,
		`{"n":9007199254740992,"m":-9007199254740992,"big":1.7976931348623157e308,"small":5e-324}`,
		`{"s":"<b>&amp;</b> \u00e9 \u2028","esc":"\u0041\n","nested":{"z":[true,false,null,{"y":1.0}],"a":"x"}}`,
		`{"dup":1,"dup":2}`,
		`[1,2.50,"x"]`,
		`not json`,
	}
	for _, p := range payloads {
		t.Run("payload "+p, func(t *testing.T) {
			r := withPayload(p)
			if got, want := r.ContentHash(), legacyContentHash(r); got != want {
				t.Fatalf("hash changed from the stored %s to %s", want, got)
			}
		})
	}
}
