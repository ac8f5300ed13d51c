package schemas

import (
	"strings"
	"testing"
)

// Seen-set entries store hashes of this canonical text: it must not change
// between versions, or retries of stored requests become conflicts.
func TestTheCanonicalTextOfANumberIsStable(t *testing.T) {
	d64 := strings.Repeat("1234567890", 6) + "1237" // 64 digits, more than a float64 holds
	cases := []struct{ name, in, want string }{
		{"a number float64 holds keeps encoding/json's text", "1.50", "1.5"},
		{"a large number float64 holds keeps its exponent form", "1e21", "1e+21"},
		{"an integer float64 holds with trailing zeros", "100", "100"},
		{"negative zero stays as encoding/json wrote it", "-0.0", "-0"},
		{"an integer beyond 2^53 keeps its digits", "9007199254740993", "9007199254740993"},
		{"its trailing zeros are kept as an integer", "9007199254740993000", "9007199254740993000"},
		{"the same value with a fraction and an exponent", "9007199254740.993e6", "9007199254740993000"},
		{"a negative integer beyond 2^53", "-9007199254740993", "-9007199254740993"},
		{"an integer of 64 digits is written whole", d64, d64},
		{"an integer of 65 digits gets an exponent", d64 + "0", d64 + "e1"},
		{"a large exponent is not written out", "12345678901234567891e50", "12345678901234567891e50"},
		{"a long decimal keeps every digit", "0.10000000000000000001", "10000000000000000001e-20"},
		{"a number beyond float64's range", "1E400", "1e400"},
		{"a number below float64's smallest", "-1e-400", "-1e-400"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := string(canonicalNumber(c.in)); got != c.want {
				t.Fatalf("canonicalNumber(%s) = %s, want %s", c.in, got, c.want)
			}
		})
	}
}
