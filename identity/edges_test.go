package identity

import (
	"errors"
	"strings"
	"testing"
)

// Edges of the canonical text that the reference vectors do not reach:
// lengths past the buffer's size hint, the last bytes of the encoded
// surrogate range, truncated encodings, and texts that end mid-key.

func TestCanonicalTextOfLongTypesAndRecipients(t *testing.T) {
	long := strings.Repeat("t", 200)
	cases := []struct {
		name, typ, recipient string
		key                  Key
		want                 string
	}{
		{"a type longer than the size hint is written whole", long, "u", Key{}, `{"t":"` + long + `","r":"u","k":{}}`},
		{"a recipient longer than the size hint is written whole", "t", long, Key{}, `{"t":"t","r":"` + long + `","k":{}}`},
		{"a key of many members is written whole", "t", "u", Key{"a": Number(1), "b": Number(2), "c": Number(3), "d": Number(4)},
			`{"t":"t","r":"u","k":{"a":1,"b":2,"c":3,"d":4}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CanonicalJSON(c.typ, c.recipient, c.key)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("CanonicalJSON = %s, want %s", got, c.want)
			}
		})
	}
}

func TestEncodedSurrogatesAtTheEdgesOfTheirRange(t *testing.T) {
	cases := []struct {
		name, value, want string
	}{
		{"the last low surrogate U+DFFF is escaped", "\xed\xbf\xbf", `"\udfff"`},
		{"a surrogate whose last byte is 0xBF is escaped", "\xed\xa0\xbf", `"\ud83f"`},
		{"the first high surrogate U+D800 is escaped", "\xed\xa0\x80", `"\ud800"`},
		{"a high then a low surrogate is one character", "\xed\xa0\xbd\xed\xb8\x80", `"😀"`},
		{"U+E000, just past the surrogates, is written as itself", "\ue000", "\"\ue000\""},
		{"U+D7FF, just before the surrogates, is written as itself", "\ud7ff", "\"\ud7ff\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CanonicalJSON("t", "u", Key{"s": String(c.value)})
			if err != nil {
				t.Fatal(err)
			}
			if want := `{"t":"t","r":"u","k":{"s":` + c.want + `}}`; string(got) != want {
				t.Fatalf("CanonicalJSON = %s, want %s", got, want)
			}
		})
	}
}

func TestTruncatedOrOutOfRangeEncodingsAreRefused(t *testing.T) {
	for _, c := range []struct{ name, value string }{
		{"a surrogate encoding cut after two bytes", "x\xed\xa0"},
		{"a surrogate encoding cut after one byte", "x\xed"},
		{"a second byte past the surrogate range", "\xed\xc0\x80"},
		{"a third byte past the continuation range", "\xed\xa0\xc0"},
		{"a third byte below the continuation range", "\xed\xa0\x7f"},
	} {
		t.Run(c.name+" is refused", func(t *testing.T) {
			if b, err := CanonicalJSON("t", "u", Key{"s": String(c.value)}); !errors.Is(err, ErrInvalidString) {
				t.Fatalf("CanonicalJSON = %s, %v; want ErrInvalidString", b, err)
			}
		})
	}
}

func TestKeysThatEndMidwayAreRefusedWithTheReason(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"an object left open", `{`, "want a member name"},
		{"an object left open after a comma", `{"a":1,`, "want a member name"},
		{"a member without its value", `{"a":`, `member "a" has no value`},
		{"a member name without its colon", `{"a"`, `want ':' after member name "a"`},
		{"null at the very end", `{"a":null`, `member "a" is null`},
		{"true at the very end", `{"a":true`, `member "a" is a boolean`},
		{"false at the very end", `{"a":false`, `member "a" is a boolean`},
		{"a number at the very end", `{"a":10`, `want ',' or '}' after member "a"`},
		{"an exponent without digits", `{"a":1e}`, "malformed number"},
		{"a minus sign alone", `{"a":-}`, "malformed number"},
		{"a unicode escape cut short at the end", `{"a":"\u00`, "short \\u escape"},
		{"a unicode escape with a sign", `{"a":"\u+123"}`, "malformed \\u escape"},
		{"a backslash at the very end", `{"a":"\`, "unterminated string"},
		{"an opening quote at the very end", `{"a":"`, "unterminated string"},
		{"a name's opening quote at the very end", `{"`, "unterminated string"},
		{"a string cut after an escape", `{"a":"\n`, "unterminated string"},
		{"a string cut after a multi-byte character", "{\"a\":\"é", "unterminated string"},
	} {
		t.Run(c.name+" is refused", func(t *testing.T) {
			k, err := ParseKey(c.text)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseKey(%q) = %#v, %v; want an error saying %q", c.text, k, err, c.want)
			}
		})
	}
}

func TestNumbersWithZerosAndAllDigitsAreRead(t *testing.T) {
	for _, c := range []struct {
		text string
		want float64
	}{
		{`{"n":10}`, 10}, {`{"n":90}`, 90}, {`{"n":1090.05}`, 1090.05}, {`{"n":-0}`, 0}, {`{"n":0.5e10}`, 0.5e10},
		{`{"n":123456789}`, 123456789}, {`{"n":9e0}`, 9}, {`{"n":1E-09}`, 1e-9},
	} {
		t.Run(c.text+" is read as a number", func(t *testing.T) {
			k, err := ParseKey(c.text)
			if err != nil {
				t.Fatal(err)
			}
			if f, ok := k["n"].AsNumber(); !ok || f != c.want {
				t.Fatalf("ParseKey(%s) = %#v, want %v", c.text, k, c.want)
			}
		})
	}
}

func TestStringEdgesOfTheKeyParser(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"a lone continuation byte is refused", "{\"a\":\"\x80\"}", "not valid UTF-8"},
		{"a lone 0xC0 byte is refused", "{\"a\":\"\xc0\"}", "not valid UTF-8"},
		{"a unicode escape that ends the text leaves the string unterminated", `{"a":"\u0041`, "unterminated string"},
		{"a unicode escape with a sign is refused", `{"a":"\u-123"}`, "malformed \\u escape"},
		{"a unicode escape with a 0x prefix is refused", `{"a":"\u0x12"}`, "malformed \\u escape"},
		{"a unicode escape with an underscore is refused", `{"a":"\u1_23"}`, "malformed \\u escape"},
	} {
		t.Run(c.name, func(t *testing.T) {
			k, err := ParseKey(c.text)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseKey(%q) = %#v, %v; want an error saying %q", c.text, k, err, c.want)
			}
		})
	}
	for _, c := range []struct{ name, text, want string }{
		{"three-byte characters with 0x80 continuation bytes are read", "{\"a\":\"x\u1000\u0800\"}", "x\u1000\u0800"},
		{"a space right after the quote is read", `{"a":" x"}`, " x"},
		{"hex digits of both cases are read", `{"a":"\u00e9\u00C9"}`, "éÉ"},
	} {
		t.Run(c.name, func(t *testing.T) {
			k, err := ParseKey(c.text)
			if err != nil {
				t.Fatal(err)
			}
			if s, ok := k["a"].AsString(); !ok || s != c.want {
				t.Fatalf("ParseKey(%q) = %#v, want %q", c.text, k, c.want)
			}
		})
	}
}

func TestNumbersBetweenZeroAndOneAreWrittenWithALeadingZero(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{{0.5, "0.5"}, {-0.5, "-0.5"}, {0.123, "0.123"}, {0.000001, "0.000001"}, {0.0000001, "1e-7"}, {1.5, "1.5"}, {1e21, "1e+21"}, {123e18, "123000000000000000000"}, {123e20, "1.23e+22"}} {
		t.Run(c.want, func(t *testing.T) {
			got, err := CanonicalJSON("t", "u", Key{"n": Number(c.f)})
			if err != nil {
				t.Fatal(err)
			}
			if want := `{"t":"t","r":"u","k":{"n":` + c.want + `}}`; string(got) != want {
				t.Fatalf("CanonicalJSON = %s, want %s", got, want)
			}
		})
	}
}

func TestTheLargestArrayIndexSortsFirstAndTheNextNameDoesNot(t *testing.T) {
	got, err := CanonicalJSON("t", "u", Key{"a": Number(1), "4294967295": Number(2), "4294967294": Number(3), "10": Number(4), "9": Number(5)})
	if err != nil {
		t.Fatal(err)
	}
	// Indices ascending (9, 10, 4294967294), then the other names in code
	// unit order: 4294967295 is 2^32-1, not an array index.
	if want := `{"t":"t","r":"u","k":{"9":5,"10":4,"4294967294":3,"4294967295":2,"a":1}}`; string(got) != want {
		t.Fatalf("CanonicalJSON = %s, want %s", got, want)
	}
}
