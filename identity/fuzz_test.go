package identity

import (
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzNotificationID checks the invariants of the notification id on
// arbitrary bytes: it is refused exactly when a string is not (extended)
// UTF-8 or a name is "__proto__"; otherwise it is deterministic, 32 lower
// hex, independent of member order, and survives a round trip of the key
// through its JSON form.
func FuzzNotificationID(f *testing.F) {
	f.Add("invoice.paid", "u_8831", "invoice", "inv_2201", "n", 1.0)
	f.Add("", "", "", "", "0", 0.0)
	f.Add("<b>&</b>", "\u2028\u2029", "10", "\"\\\x00\x1f\x7f", "9", math.Copysign(0, -1))
	f.Add("t", "r", "\uff5e", "😀", "😀", 1e21)
	f.Add("t", "r", "\xed\xa0\x80", "\xed\xb0\x80", "\xed\xa0\xbd\xed\xb8\x80", 5e-324)
	f.Add("t\xff", "r", "4294967294", "x", "4294967295", 1e-7)
	f.Add("t", "r", "__proto__", "x", "01", 0.1)
	f.Fuzz(func(t *testing.T, typ, recipient, name1, value1, name2 string, n float64) {
		key := Key{name1: String(value1), name2: Number(n)}
		id, err := NotificationID(typ, recipient, key)

		valid := func(s string) bool { _, err := appendUnits(nil, s); return err == nil }
		// When name1 == name2, the number replaced the string member.
		member1 := name1 != name2
		if !valid(typ) || !valid(recipient) || !valid(name2) || name2 == protoKey ||
			(member1 && (!valid(name1) || !valid(value1) || name1 == protoKey || jsEqual(name1, name2))) {
			if err == nil {
				t.Fatalf("NotificationID(%q, %q, %#v) = %s, want an error", typ, recipient, key, id)
			}
			return
		}
		if err != nil {
			t.Fatalf("NotificationID(%q, %q, %#v): %v", typ, recipient, key, err)
		}
		if !Valid(id) {
			t.Fatalf("NotificationID = %q, not 32 lower hex", id)
		}
		if again, _ := NotificationID(typ, recipient, key); again != id {
			t.Fatalf("NotificationID is not deterministic: %s then %s", id, again)
		}

		canon, _ := CanonicalJSON(typ, recipient, key)
		if !json.Valid(canon) {
			t.Fatalf("CanonicalJSON is not JSON: %q", canon)
		}
		if utf8.ValidString(typ) && utf8.ValidString(recipient) {
			var back struct{ T, R string }
			if err := json.Unmarshal(canon, &back); err != nil || back.T != typ || back.R != recipient {
				t.Fatalf("CanonicalJSON %q reads back as %+v, %v", canon, back, err)
			}
		}

		// The key's JSON form, in its canonical order and in both member
		// orders, parses back to the same id.
		b, err := key.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		texts := []string{string(b)}
		if !jsEqual(name1, name2) && finite(key) {
			var ab, ba strings.Builder
			keyJSON(&ab, key, []string{name1, name2})
			keyJSON(&ba, key, []string{name2, name1})
			texts = append(texts, ab.String(), ba.String())
		}
		for _, text := range texts {
			if !finite(key) {
				break // NaN and ±Inf have no JSON spelling
			}
			got, err := NotificationIDFromJSON(typ, recipient, text)
			if err != nil {
				t.Fatalf("NotificationIDFromJSON(%q): %v", text, err)
			}
			if got != id {
				t.Fatalf("key %#v as %q gives %s, want %s", key, text, got, id)
			}
		}
	})
}

// jsEqual reports whether two valid strings are the same JavaScript string.
func jsEqual(a, b string) bool {
	ua, _ := appendUnits(nil, a)
	ub, _ := appendUnits(nil, b)
	return slices.Equal(ua, ub)
}

func TestKeyMemberOrderNeverChangesID(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := range 500 {
		key := randKey(r, 8, true)
		typ, recipient := randString(r, 3), randString(r, 3)
		want, err := NotificationID(typ, recipient, key)
		if err != nil {
			t.Fatalf("key %d %#v: %v", i, key, err)
		}
		names := slices.Collect(maps.Keys(key))
		for range 5 {
			r.Shuffle(len(names), func(a, b int) { names[a], names[b] = names[b], names[a] })
			var text strings.Builder
			keyJSON(&text, key, names)
			got, err := NotificationIDFromJSON(typ, recipient, text.String())
			if err != nil {
				t.Fatalf("key %d as %s: %v", i, text.String(), err)
			}
			if got != want {
				t.Fatalf("key %d: member order %q gives %s, want %s", i, names, got, want)
			}
		}
	}
}
