package identity

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// CanonicalJSON returns the bytes [NotificationID] hashes: the UTF-8 encoding
// of JavaScript's JSON.stringify({t: typ, r: recipient, k: sortedKey}) (see
// the package documentation). It is exported for debugging and for
// reproducing ids elsewhere; the id is what herald stores.
func CanonicalJSON(typ, recipient string, key Key) ([]byte, error) {
	b, err := appendCanonicalHead(make([]byte, 0, 64+len(typ)+len(recipient)+16*len(key)), typ, recipient)
	if err != nil {
		return nil, err
	}
	if b, err = key.appendJSON(b); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendCanonicalHead appends what [CanonicalJSON] writes before the key:
// {"t":typ,"r":recipient,"k":
func appendCanonicalHead(b []byte, typ, recipient string) ([]byte, error) {
	b = append(b, `{"t":`...)
	b, err := appendJSString(b, typ)
	if err != nil {
		return nil, fmt.Errorf("identity: type: %w", err)
	}
	b = append(b, `,"r":`...)
	if b, err = appendJSString(b, recipient); err != nil {
		return nil, fmt.Errorf("identity: recipient: %w", err)
	}
	return append(b, `,"k":`...), nil
}

// member is one key member on its way to the canonical text.
type member struct {
	name  []uint16 // as UTF-16 code units
	index int64    // array index, or -1
	value Value
}

func (k Key) appendJSON(b []byte) ([]byte, error) {
	ms := make([]member, 0, len(k))
	for name, v := range k {
		u, err := appendUnits(nil, name)
		if err != nil {
			return nil, fmt.Errorf("identity: key name %q: %w", name, err)
		}
		if name == protoKey {
			return nil, fmt.Errorf("identity: key name %q: %w", name, errProto)
		}
		if v.kind == kindNone {
			return nil, fmt.Errorf("identity: key %q: zero Value (use identity.String or identity.Number)", name)
		}
		ms = append(ms, member{name: u, index: arrayIndex(u), value: v})
	}
	slices.SortFunc(ms, compareMembers)
	for i := 1; i < len(ms); i++ {
		// Two Go spellings of one JavaScript string (a surrogate pair written
		// as two three-byte sequences and as one four-byte sequence).
		if slices.Equal(ms[i-1].name, ms[i].name) {
			return nil, fmt.Errorf("identity: key name %q appears twice once read as UTF-16", unitsToString(ms[i].name))
		}
	}
	b = append(b, '{')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendQuotedUnits(b, m.name)
		b = append(b, ':')
		switch m.value.kind {
		case kindString:
			u, err := appendUnits(nil, m.value.s)
			if err != nil {
				return nil, fmt.Errorf("identity: key %q: value: %w", unitsToString(m.name), err)
			}
			b = appendQuotedUnits(b, u)
		case kindNumber:
			b = appendJSNumber(b, m.value.f)
		}
	}
	return append(b, '}'), nil
}

// compareMembers orders members as a JavaScript object built by inserting
// them in sorted order enumerates them: array indices ascending, then every
// other name in UTF-16 code unit order.
func compareMembers(a, b member) int {
	if a.index >= 0 && b.index >= 0 {
		return cmp.Compare(a.index, b.index)
	}
	if a.index >= 0 {
		return -1
	}
	if b.index >= 0 {
		return 1
	}
	return slices.Compare(a.name, b.name)
}

// maxArrayIndex is the largest array index, 2^32 - 2.
const maxArrayIndex = 1<<32 - 2

// arrayIndex returns the value of name if it is an ECMAScript array index
// (the canonical decimal form of an integer in [0, 2^32-2]), otherwise -1.
func arrayIndex(name []uint16) int64 {
	if len(name) == 0 || len(name) > 10 || (len(name) > 1 && name[0] == '0') {
		return -1
	}
	var n int64
	for _, c := range name {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	if n > maxArrayIndex {
		return -1
	}
	return n
}

// appendUnits appends the UTF-16 code units of s, read as UTF-8 extended
// with encoded surrogate code points (ED A0 80 … ED BF BF).
func appendUnits(dst []uint16, s string) ([]uint16, error) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			if u, ok := surrogateAt(s, i); ok {
				dst = append(dst, u)
				i += 3
				continue
			}
			return dst, fmt.Errorf("byte %d: %w", i, ErrInvalidString)
		}
		if r >= 0x10000 {
			r1, r2 := utf16.EncodeRune(r)
			dst = append(dst, uint16(r1), uint16(r2))
		} else {
			dst = append(dst, uint16(r))
		}
		i += size
	}
	return dst, nil
}

// surrogateAt decodes the three-byte encoding of a surrogate code point at
// s[i:].
func surrogateAt(s string, i int) (uint16, bool) {
	if i+3 > len(s) || s[i] != 0xED || s[i+1] < 0xA0 || s[i+1] > 0xBF || s[i+2] < 0x80 || s[i+2] > 0xBF {
		return 0, false
	}
	return 0xD000 | uint16(s[i+1]&0x3F)<<6 | uint16(s[i+2]&0x3F), true
}

func isHigh(u uint16) bool      { return u >= 0xD800 && u <= 0xDBFF }
func isLow(u uint16) bool       { return u >= 0xDC00 && u <= 0xDFFF }
func isSurrogate(u uint16) bool { return u >= 0xD800 && u <= 0xDFFF }

// appendWTF8 appends code units as UTF-8, pairing surrogates and writing a
// lone surrogate as its three-byte encoding.
func appendWTF8(b []byte, units []uint16) []byte {
	for i := 0; i < len(units); i++ {
		u := units[i]
		if isHigh(u) && i+1 < len(units) && isLow(units[i+1]) {
			b = utf8.AppendRune(b, utf16.DecodeRune(rune(u), rune(units[i+1])))
			i++
		} else if isSurrogate(u) {
			b = append(b, 0xED, 0xA0|byte(u>>6)&0x1F, 0x80|byte(u)&0x3F)
		} else {
			b = utf8.AppendRune(b, rune(u))
		}
	}
	return b
}

func unitsToString(units []uint16) string { return string(appendWTF8(nil, units)) }

// appendJSString appends s quoted as JSON.stringify quotes it.
func appendJSString(b []byte, s string) ([]byte, error) {
	u, err := appendUnits(make([]uint16, 0, len(s)), s)
	if err != nil {
		return b, err
	}
	return appendQuotedUnits(b, u), nil
}

const lowerHex = "0123456789abcdef"

// appendQuotedUnits is ECMAScript QuoteJSONString (ES2019, well-formed
// JSON.stringify), writing the result as UTF-8.
func appendQuotedUnits(b []byte, units []uint16) []byte {
	b = append(b, '"')
	for i := 0; i < len(units); i++ {
		u := units[i]
		switch u {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			if u < 0x20 {
				b = append(b, '\\', 'u', '0', '0', lowerHex[u>>4], lowerHex[u&0xF])
			} else if isHigh(u) && i+1 < len(units) && isLow(units[i+1]) {
				b = utf8.AppendRune(b, utf16.DecodeRune(rune(u), rune(units[i+1])))
				i++
			} else if isSurrogate(u) {
				b = append(b, '\\', 'u', lowerHex[u>>12], lowerHex[u>>8&0xF], lowerHex[u>>4&0xF], lowerHex[u&0xF])
			} else {
				b = utf8.AppendRune(b, rune(u))
			}
		}
	}
	return append(b, '"')
}

// appendJSNumber appends f as JSON.stringify writes a number: ECMAScript
// Number::toString(f) for finite f, null otherwise.
func appendJSNumber(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	if f == 0 { // +0 and -0
		return append(b, '0')
	}
	if f < 0 {
		b = append(b, '-')
		f = -f
	}
	// Shortest round-tripping digits, closest to f: "d.ddde±XX".
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	ePos := slices.Index(e, 'e')
	exp, _ := strconv.Atoi(string(e[ePos+1:]))
	var digitBuf [24]byte
	digits := append(digitBuf[:0], e[0])
	if ePos > 1 {
		digits = append(digits, e[2:ePos]...)
	}
	// f = 0.digits × 10^n, with k digits.
	k, n := len(digits), exp+1
	if k <= n && n <= 21 {
		b = append(b, digits...)
		for range n - k {
			b = append(b, '0')
		}
	} else if 0 < n && n <= 21 {
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	} else if -6 < n && n <= 0 {
		b = append(b, '0', '.')
		for range -n {
			b = append(b, '0')
		}
		b = append(b, digits...)
	} else {
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, int64(n-1), 10)
	}
	return b
}
