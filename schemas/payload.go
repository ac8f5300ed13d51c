package schemas

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// The canonical text of a payload, which ContentHash hashes, is what
// encoding/json writes for the payload decoded into any with exact numbers
// (see compactJSON): object keys sorted by their decoded text, the last of
// a key given twice kept, no white space, strings escaped as encoding/json
// escapes them (HTML characters, U+2028 and U+2029 included) and numbers
// in canonicalNumber's text. appendCanonical writes that text without
// building the document in memory: a string or a number in the usual
// form (printable ASCII without escapes or HTML characters; an integer of
// at most 15 digits) is already canonical and copied as it is; any other
// goes through encoding/json and canonicalNumber, so the rare cases keep
// their exact, long-tested text. Hashes stored in seen-sets depend on this
// text: TestCanonicalPayloadIsEncodingJSONs checks it against the
// decode-and-marshal it replaces.

// appendCanonical appends the canonical text of the valid JSON document
// raw to dst. members is room for the parser's objects' members (nil: it
// allocates its own); the room it used is returned for the next call.
func appendCanonical(dst, raw []byte, members []member) ([]byte, []member) {
	p := canonParser{in: raw, members: members[:0]}
	return p.value(dst), p.members[:0]
}

type canonParser struct {
	in []byte
	i  int
	// members is a stack of the open objects' members: an object's are
	// above those of the objects it is nested in, and are popped when it
	// is written.
	members []member
}

// space skips white space. It is called only where valid JSON has a
// token next, so it never runs past the end.
func (p *canonParser) space() {
	for {
		switch p.in[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *canonParser) value(dst []byte) []byte {
	p.space()
	switch c := p.in[p.i]; {
	case c == '{':
		return p.object(dst)
	case c == '[':
		return p.array(dst)
	case c == '"':
		tok := p.stringToken()
		return appendCanonicalString(dst, tok)
	case c == 't':
		p.i += 4
		return append(dst, "true"...)
	case c == 'f':
		p.i += 5
		return append(dst, "false"...)
	case c == 'n':
		p.i += 4
		return append(dst, "null"...)
	default:
		start := p.i
		for p.i < len(p.in) && strings.IndexByte("+-0123456789.eE", p.in[p.i]) >= 0 {
			p.i++
		}
		return appendCanonicalNumber(dst, p.in[start:p.i])
	}
}

func (p *canonParser) array(dst []byte) []byte {
	p.i++ // [
	dst = append(dst, '[')
	p.space()
	if p.in[p.i] == ']' {
		p.i++
		return append(dst, ']')
	}
	for {
		dst = p.value(dst)
		p.space()
		if p.in[p.i] == ']' {
			p.i++
			return append(dst, ']')
		}
		p.i++ // ,
		dst = append(dst, ',')
	}
}

// member is one member of an object: its decoded key and where its
// canonical text ("key":value) sits in the scratch buffer.
type member struct {
	key        []byte
	start, end int
}

func (p *canonParser) object(dst []byte) []byte {
	p.i++ // {
	p.space()
	if p.in[p.i] == '}' {
		p.i++
		return append(dst, '{', '}')
	}
	// Each member's text is written after dst's end, then the members are
	// copied back in key order.
	base := len(dst)
	mb := len(p.members) // this object's members are p.members[mb:]
	for {
		p.space()
		tok := p.stringToken()
		start := len(dst)
		dst = appendCanonicalString(dst, tok)
		key := decodedKey(tok, dst[start:])
		p.space()
		p.i++ // :
		dst = append(dst, ':')
		dst = p.value(dst)
		p.members = append(p.members, member{key: key, start: start, end: len(dst)})
		p.space()
		if p.in[p.i] == '}' {
			p.i++
			break
		}
		p.i++ // ,
	}
	// The last of a key given twice wins, as in a decoded map: a stable
	// sort keeps members of one key in their order, and only the last of
	// each run is written.
	members := p.members[mb:]
	slices.SortStableFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	// The object is written after the members' texts, then moved down
	// over them.
	end := len(dst)
	dst = append(dst, '{')
	for i, m := range members {
		if i+1 < len(members) && bytes.Equal(members[i+1].key, m.key) {
			continue
		}
		if len(dst) > end+1 {
			dst = append(dst, ',')
		}
		dst = append(dst, dst[m.start:m.end]...)
	}
	dst = append(dst, '}')
	p.members = p.members[:mb]
	return dst[:base+copy(dst[base:], dst[end:])]
}

// stringToken returns the string token at p.i, quotes included.
func (p *canonParser) stringToken() []byte {
	start := p.i
	p.i++
	for p.in[p.i] != '"' {
		if p.in[p.i] == '\\' {
			p.i++
		}
		p.i++
	}
	p.i++
	return p.in[start:p.i]
}

// plainString reports whether a string token (quotes included) is
// printable ASCII without escapes, quotes or HTML characters: its text is
// its decoded value, and encoding/json writes it back unchanged.
func plainString(tok []byte) bool {
	for _, c := range tok[1 : len(tok)-1] {
		if c < 0x20 || c > 0x7e || c == '\\' || c == '"' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendCanonicalString appends a string token as encoding/json writes
// its decoded value.
func appendCanonicalString(dst, tok []byte) []byte {
	if plainString(tok) {
		return append(dst, tok...)
	}
	var s string
	_ = json.Unmarshal(tok, &s) // a valid token: cannot fail
	b, _ := json.Marshal(s)     // a string: cannot fail
	return append(dst, b...)
}

// decodedKey is the decoded text of a key token, whose canonical text is
// canon: for a plain token, its own bytes (no copy).
func decodedKey(tok, canon []byte) []byte {
	if plainString(tok) {
		return tok[1 : len(tok)-1]
	}
	var s string
	_ = json.Unmarshal(canon, &s) // encoding/json's own text: cannot fail
	return []byte(s)
}

// appendCanonicalNumber appends canonicalNumber's text of a valid JSON
// number: an integer of at most 15 digits (no sign of zero, no leading
// zero) is its own canonical text, as a float64 holds it exactly and
// encoding/json writes it in digits.
func appendCanonicalNumber(dst, num []byte) []byte {
	if plainNumber(num) {
		return append(dst, num...)
	}
	return append(dst, canonicalNumber(string(num))...)
}

// plainNumber reports whether a valid JSON number is an integer of 1 to
// 15 digits without a leading zero, or 0: its text is canonicalNumber's.
func plainNumber(num []byte) bool {
	digits := num
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 || digits[0] == '0' && len(num) > 1 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
