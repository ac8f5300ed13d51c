package identity

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Key is what distinguishes one notification from another of the same type
// to the same recipient, e.g. {"invoice": "inv_2201"}. Its values are
// strings or numbers. Member order never matters: the canonical form sorts
// the names.
type Key map[string]Value

// Value is one key value: a string or a number. The zero Value is neither
// and is rejected by [NotificationID].
type Value struct {
	kind valueKind
	s    string
	f    float64
}

type valueKind uint8

const (
	kindNone valueKind = iota
	kindString
	kindNumber
)

// String returns a string key value.
func String(s string) Value { return Value{kind: kindString, s: s} }

// Number returns a number key value. Numbers are JavaScript numbers: 1 and
// 1.0 are the same value, -0 is written as 0, and NaN and ±Inf are all
// written as null (as JSON.stringify does), so avoid them.
func Number(f float64) Value { return Value{kind: kindNumber, f: f} }

// AsString returns the value's string, if it is one.
func (v Value) AsString() (string, bool) { return v.s, v.kind == kindString }

// AsNumber returns the value's number, if it is one.
func (v Value) AsNumber() (float64, bool) { return v.f, v.kind == kindNumber }

// GoString shows the value as the Go expression that builds it.
func (v Value) GoString() string {
	switch v.kind {
	case kindString:
		return fmt.Sprintf("identity.String(%q)", v.s)
	case kindNumber:
		return fmt.Sprintf("identity.Number(%v)", v.f)
	}
	return "identity.Value{}"
}

// MarshalJSON writes the key in canonical form: the "k" member of
// [CanonicalJSON]. [ParseKey] reads it back to an equal key.
func (k Key) MarshalJSON() ([]byte, error) {
	if k == nil {
		return []byte("{}"), nil
	}
	return k.appendJSON(nil)
}

// UnmarshalJSON reads a key with [ParseKey]. JSON null leaves k unchanged.
func (k *Key) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	key, err := ParseKey(string(b))
	if err != nil {
		return err
	}
	*k = key
	return nil
}

// protoKey is the one name the reference function cannot represent.
const protoKey = "__proto__"

var errProto = errors.New(`the reference JavaScript drops a member named "__proto__"; rename it`)

// ParseKey parses a JSON object whose values are strings or numbers into a
// Key, reading it as JavaScript's JSON.parse would: numbers become the
// nearest float64 (so 1.0, 1 and 1e0 are the same key), a later duplicate
// name wins, and \ud800-style escapes of lone surrogates are kept (as
// encoded surrogates; see the package documentation). Objects, arrays,
// booleans, null, numbers beyond float64's range, and the name "__proto__"
// are errors naming the member.
func ParseKey(text string) (Key, error) {
	p := keyParser{s: text}
	key, err := p.object()
	if err != nil {
		return nil, fmt.Errorf("identity: key: %w", err)
	}
	return key, nil
}

type keyParser struct {
	s string
	i int
}

func (p *keyParser) object() (Key, error) {
	p.space()
	if !p.take('{') {
		return nil, p.errorf("want a JSON object")
	}
	key := Key{}
	p.space()
	if !p.take('}') {
		for {
			p.space()
			if p.i >= len(p.s) || p.s[p.i] != '"' {
				return nil, p.errorf("want a member name")
			}
			name, err := p.str()
			if err != nil {
				return nil, err
			}
			if name == protoKey {
				return nil, fmt.Errorf("member %q: %w", name, errProto)
			}
			p.space()
			if !p.take(':') {
				return nil, p.errorf("want ':' after member name %q", name)
			}
			p.space()
			v, err := p.value(name)
			if err != nil {
				return nil, err
			}
			key[name] = v
			p.space()
			if p.take(',') {
				continue
			}
			if p.take('}') {
				break
			}
			return nil, p.errorf("want ',' or '}' after member %q", name)
		}
	}
	p.space()
	if p.i != len(p.s) {
		return nil, p.errorf("unexpected text after the object")
	}
	return key, nil
}

func (p *keyParser) value(name string) (Value, error) {
	if p.i >= len(p.s) {
		return Value{}, p.errorf("member %q has no value", name)
	}
	rest := p.s[p.i:]
	notAllowed := func(what string) (Value, error) {
		return Value{}, fmt.Errorf("member %q is %s: key values must be strings or numbers", name, what)
	}
	c := rest[0]
	if c == '"' {
		s, err := p.str()
		if err != nil {
			return Value{}, fmt.Errorf("member %q: %w", name, err)
		}
		return String(s), nil
	}
	if c == '-' || (c >= '0' && c <= '9') {
		f, err := p.number()
		if err != nil {
			return Value{}, fmt.Errorf("member %q: %w", name, err)
		}
		return Number(f), nil
	}
	switch c {
	case '{':
		return notAllowed("an object")
	case '[':
		return notAllowed("an array")
	}
	if hasPrefix(rest, "true") || hasPrefix(rest, "false") {
		return notAllowed("a boolean")
	}
	if hasPrefix(rest, "null") {
		return notAllowed("null")
	}
	return Value{}, p.errorf("member %q: want a value", name)
}

func hasPrefix(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// number scans a JSON number and converts it as JSON.parse does (correctly
// rounded to the nearest float64).
func (p *keyParser) number() (float64, error) {
	start := p.i
	p.take('-')
	if !p.take('0') && p.digits() == 0 {
		return 0, p.errorf("malformed number")
	}
	if p.take('.') && p.digits() == 0 {
		return 0, p.errorf("malformed number")
	}
	if p.take('e') || p.take('E') {
		if !p.take('+') {
			p.take('-')
		}
		if p.digits() == 0 {
			return 0, p.errorf("malformed number")
		}
	}
	text := p.s[start:p.i]
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, fmt.Errorf("number %s is beyond float64's range", text)
	}
	return f, nil
}

func (p *keyParser) digits() int {
	n := 0
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// str scans a JSON string starting at its opening quote. The result is the
// JavaScript string's code units written as UTF-8 with encoded lone
// surrogates.
func (p *keyParser) str() (string, error) {
	p.i++ // opening quote
	start := p.i
	// Fast path: no escapes, nothing but valid UTF-8.
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '"' {
			s := p.s[start:p.i]
			p.i++
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			break
		}
		p.i++
	}
	units := appendUnitsASCII(make([]uint16, 0, 2*(p.i-start)+16), p.s[start:p.i])
	for {
		if p.i >= len(p.s) {
			return "", p.errorf("unterminated string")
		}
		c := p.s[p.i]
		if c == '"' {
			p.i++
			return unitsToString(units), nil
		}
		if c < 0x20 {
			return "", p.errorf("control character U+%04X in string (escape it)", c)
		}
		if c == '\\' {
			if p.i+1 >= len(p.s) {
				return "", p.errorf("unterminated string")
			}
			esc := p.s[p.i+1]
			p.i += 2
			switch esc {
			case '"', '\\', '/':
				units = append(units, uint16(esc))
			case 'b':
				units = append(units, '\b')
			case 'f':
				units = append(units, '\f')
			case 'n':
				units = append(units, '\n')
			case 'r':
				units = append(units, '\r')
			case 't':
				units = append(units, '\t')
			case 'u':
				if p.i+4 > len(p.s) {
					return "", p.errorf("short \\u escape")
				}
				// Base 16 takes hex digits only: no sign, prefix or underscore.
				v, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 16)
				if err != nil {
					return "", p.errorf("malformed \\u escape")
				}
				units = append(units, uint16(v))
				p.i += 4
			default:
				return "", p.errorf("unknown escape \\%c", esc)
			}
			continue
		}
		// One character of UTF-8 (or an encoded surrogate).
		j := p.i + 1
		for j < len(p.s) && p.s[j] >= 0x80 && p.s[j] < 0xC0 && j-p.i < 4 {
			j++
		}
		var err error
		if units, err = appendUnits(units, p.s[p.i:j]); err != nil {
			return "", p.errorf("string: %v", err)
		}
		p.i = j
	}
}

// appendUnitsASCII appends the code units of an ASCII string.
func appendUnitsASCII(dst []uint16, s string) []uint16 {
	for i := 0; i < len(s); i++ {
		dst = append(dst, uint16(s[i]))
	}
	return dst
}

func (p *keyParser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *keyParser) take(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *keyParser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", p.i, fmt.Sprintf(format, args...))
}
