package identity

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Random inputs shared by the differential and property tests.

// pieces are the fragments random strings are made of: everything that
// JSON.stringify, UTF-16 sorting or Go's encoding/json treat specially.
var pieces = []string{
	"a", "Z", "0", "9", "_", ".", "-", " ", "inv_", "u_",
	"<", ">", "&", `"`, `\`, "/", "'", "\x7f",
	"\x00", "\x01", "\b", "\t", "\n", "\x0b", "\f", "\r", "\x1b", "\x1f",
	"é", "ß", "中", "\u00a0", "\u2028", "\u2029", "\ufeff",
	"\ue000", "\uff5e", "\ufffd", "\uffff", // high BMP: sorts after astral in UTF-16
	"😀", "𝄞", "\U00010000", "\U0010ffff", // astral
	"\xed\xa0\x80", "\xed\xa0\xbd", // lone high surrogates (U+D800, U+D83D), encoded
	"\xed\xb0\x80", "\xed\xb8\x80", // lone low surrogates (U+DC00, U+DE00), encoded
}

// indexLike are names at and around the array-index boundary.
var indexLike = []string{
	"0", "1", "7", "9", "10", "12", "100", "4294967294", "4294967295",
	"4294967296", "01", "00", "-1", "-0", "1.0", "1e3", " 1", "1 ", "+1", "",
}

var specialNumbers = []float64{
	0, math.Copysign(0, -1), 1, -1, 7, 100, 1.5, -2.5, 0.1, 0.30000000000000004,
	1e21, -1e21, 1e20, 9.999999999999999e20, 123456789012345678901,
	1e-6, 1.5e-6, 1e-7, 1.5e-7, -1.5e-7, 0.000001234,
	5e-324, -5e-324, math.MaxFloat64, -math.MaxFloat64, 0x1p-1022,
	1 << 53, 1<<53 + 2, 1e300, 123e-20, 4294967295, 1.0 / 3,
	math.NaN(), math.Inf(1), math.Inf(-1),
}

func randString(r *rand.Rand, maxPieces int) string {
	var b strings.Builder
	for range r.IntN(maxPieces + 1) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func randNumber(r *rand.Rand, finiteOnly bool) float64 {
	for {
		var f float64
		switch r.IntN(5) {
		case 0:
			f = specialNumbers[r.IntN(len(specialNumbers))]
		case 1:
			f = math.Float64frombits(r.Uint64())
		case 2:
			f = float64(r.Int64N(1<<60) - 1<<59)
		case 3:
			f = (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(60)-30))
		default:
			f = float64(r.IntN(2001) - 1000)
		}
		if finiteOnly && (math.IsNaN(f) || math.IsInf(f, 0)) {
			continue
		}
		return f
	}
}

func randName(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return indexLike[r.IntN(len(indexLike))]
	}
	return randString(r, 4)
}

// randKey returns a random key with up to maxMembers members whose names are
// distinct as JavaScript strings.
func randKey(r *rand.Rand, maxMembers int, finiteOnly bool) Key {
	k := Key{}
	seen := map[string]bool{}
	for range r.IntN(maxMembers + 1) {
		name := randName(r)
		u, _ := appendUnits(nil, name)
		if js := unitsToString(u); seen[js] || name == protoKey {
			continue
		} else {
			seen[js] = true
		}
		if r.IntN(2) == 0 {
			k[name] = String(randString(r, 6))
		} else {
			k[name] = Number(randNumber(r, finiteOnly))
		}
	}
	return k
}

// jsonASCII writes s as a JSON string in pure ASCII, every other code unit
// (surrogate halves included) as a \u escape, so that JSON.parse sees
// exactly the code units identity reads s as.
func jsonASCII(b *strings.Builder, s string) {
	u, err := appendUnits(nil, s)
	if err != nil {
		panic(err)
	}
	b.WriteByte('"')
	for _, c := range u {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(byte(c))
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(byte(c))
		default:
			b.WriteString(`\u`)
			b.WriteString(strconv.FormatUint(uint64(c)|0x10000, 16)[1:])
		}
	}
	b.WriteByte('"')
}

// jsonNumber writes f so that JSON.parse reads back exactly f (the shortest
// round-tripping digits), or, for NaN and ±Inf, as {"$": "NaN"} and so on.
func jsonNumber(b *strings.Builder, f float64) {
	switch {
	case math.IsNaN(f):
		b.WriteString(`{"$":"NaN"}`)
	case math.IsInf(f, 1):
		b.WriteString(`{"$":"Infinity"}`)
	case math.IsInf(f, -1):
		b.WriteString(`{"$":"-Infinity"}`)
	default:
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	}
}

// keyJSON writes the members of k in the given name order.
func keyJSON(b *strings.Builder, k Key, names []string) {
	b.WriteByte('{')
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		jsonASCII(b, name)
		b.WriteByte(':')
		v := k[name]
		if s, ok := v.AsString(); ok {
			jsonASCII(b, s)
		} else {
			f, _ := v.AsNumber()
			jsonNumber(b, f)
		}
	}
	b.WriteByte('}')
}
