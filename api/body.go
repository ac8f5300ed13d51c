package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/heraldhq/herald/sdk"
)

// readJSON reads a request body of at most limit bytes and checks that it
// is one JSON value that every JSON reader reads the same way: valid UTF-8,
// no lone surrogate escapes (\ud800 without its pair: encoding/json would
// silently turn it into U+FFFD, and identity would read it as a different
// string), no duplicate member names, nothing after the value. Type and
// recipient strings are then safe to decode with encoding/json.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *problem) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, newProblem(http.StatusUnsupportedMediaType, probUnsupportedType, "Unsupported media type",
				"send the body as application/json", sdk.FieldError{Field: "header:Content-Type", Message: "must be application/json"})
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, newProblem(http.StatusRequestEntityTooLarge, probTooLarge, "Body too large",
				fmt.Sprintf("the body is larger than %d bytes", limit), sdk.FieldError{Field: "body", Message: fmt.Sprintf("at most %d bytes", limit)})
		}
		return nil, badRequest("could not read the body", sdk.FieldError{Field: "body", Message: "unreadable"})
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("the body is empty; send a JSON object", sdk.FieldError{Field: "body", Message: "empty"})
	}
	if !utf8.Valid(body) {
		off := 0
		for off < len(body) {
			r, n := utf8.DecodeRune(body[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return nil, badRequest(fmt.Sprintf("the body is not valid UTF-8 (byte %d)", off), sdk.FieldError{Field: "body", Message: "invalid UTF-8"})
	}
	if p := checkJSON(body); p != nil {
		return nil, p
	}
	return body, nil
}

// frame is one open container while checkJSON walks a document.
type frame struct {
	obj     bool
	names   map[string]bool
	key     string // current member name (objects)
	idx     int    // current index (arrays)
	wantKey bool
}

// checkJSON checks b as readJSON describes, for a body already known to be
// valid UTF-8. Most bodies pass jsontext's I-JSON check (RFC 7493: one
// valid value, no duplicate member names, no lone surrogate escapes,
// nothing after it but spaces) in one pass without allocating; a body that
// fails it is walked by checkJSONTokens, which names what is wrong and
// where. The fast check is sound only if everything it accepts the walk
// accepts too: a differential test and a fuzz target hold it to that.
func checkJSON(b []byte) *problem {
	if jsontext.Value(b).IsValid() {
		return nil
	}
	return checkJSONTokens(b)
}

// checkJSONTokens walks b token by token; see readJSON.
func checkJSONTokens(b []byte) *problem {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []*frame
	path := func(extra string) string {
		var sb strings.Builder
		for _, f := range stack {
			if f.obj {
				if f.wantKey {
					continue
				}
				if sb.Len() > 0 {
					sb.WriteByte('.')
				}
				sb.WriteString(f.key)
			} else {
				fmt.Fprintf(&sb, "[%d]", f.idx)
			}
		}
		if extra != "" {
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(extra)
		}
		if sb.Len() == 0 {
			return "body"
		}
		return sb.String()
	}
	// valueDone moves the enclosing container past one value.
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		top := stack[len(stack)-1]
		if top.obj {
			top.wantKey = true
		} else {
			top.idx++
		}
	}
	prev := int64(0)
	for {
		tok, err := dec.Token()
		if err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				return badRequest(fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se), sdk.FieldError{Field: path(""), Message: "malformed JSON"})
			}
			return badRequest("malformed JSON: "+err.Error(), sdk.FieldError{Field: path(""), Message: "malformed JSON"})
		}
		end := dec.InputOffset()
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, &frame{obj: true, names: map[string]bool{}, wantKey: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case string:
			raw := b[prev:end]
			if i := bytes.IndexByte(raw, '"'); i >= 0 {
				raw = raw[i:]
			}
			isKey := len(stack) > 0 && stack[len(stack)-1].obj && stack[len(stack)-1].wantKey
			field := path("")
			if isKey {
				field = path(t)
			}
			if loneSurrogate(raw) {
				return badRequest("a string holds a lone UTF-16 surrogate escape (not Unicode text)",
					sdk.FieldError{Field: field, Message: "lone surrogate escape"})
			}
			if isKey {
				top := stack[len(stack)-1]
				if top.names[t] {
					return badRequest(fmt.Sprintf("member %q appears twice", t), sdk.FieldError{Field: field, Message: "duplicate member name"})
				}
				top.names[t] = true
				top.key, top.wantKey = t, false
			} else {
				valueDone()
			}
		default:
			valueDone()
		}
		prev = end
		if len(stack) == 0 {
			break
		}
	}
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return badRequest("unexpected data after the JSON value", sdk.FieldError{Field: "body", Message: "trailing data"})
	}
	return nil
}

// loneSurrogate reports whether a raw JSON string literal holds a \uD800-
// \uDFFF escape that is not half of a high-low pair.
func loneSurrogate(raw []byte) bool {
	hex4 := func(i int) (uint16, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return uint16(v), err == nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if i+1 < len(raw) && raw[i+1] != 'u' {
			i++ // a two-character escape
			continue
		}
		u, ok := hex4(i)
		if !ok {
			continue
		}
		switch {
		case u >= 0xD800 && u <= 0xDBFF:
			if lo, ok := hex4(i + 6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 11
				continue
			}
			return true
		case u >= 0xDC00 && u <= 0xDFFF:
			return true
		}
		i += 5
	}
	return false
}

// fields decodes request objects member by member with exact names, telling
// type errors (400) from semantic ones (422) and naming each field. It
// reads a body that readJSON has checked (one valid value, valid UTF-8, no
// duplicate member names, no lone surrogate escapes), so its members are
// split with jsontext in one pass and a string without escapes is its
// bytes: no reflection, and one allocation per string read.
type fields struct {
	prefix   string
	members  []member          // nil when the value is not an object
	typeErrs *[]sdk.FieldError // wrong types, unknown fields: 400
	semErrs  *[]sdk.FieldError // missing, empty, out of range: 422
}

// member is one member of an object: its name, its raw value and whether
// an accessor has asked for it (unknown reports the others).
type member struct {
	name  string
	raw   jsontext.Value
	asked bool
}

// newFields decodes raw as a JSON object; a non-object is a type error.
func newFields(raw []byte, prefix string) *fields {
	f := &fields{prefix: prefix, typeErrs: new([]sdk.FieldError), semErrs: new([]sdk.FieldError)}
	f.load(raw, prefix)
	return f
}

// load splits raw, an object, into its members; anything else is a type
// error named name.
func (f *fields) load(raw []byte, name string) {
	if f.members = splitObject(raw); f.members == nil {
		f.typeErr(name, "must be a JSON object")
	}
}

// splitObject returns the members of the JSON object raw, their values
// aliasing raw, or nil when raw is not one valid object.
func splitObject(raw []byte) []member {
	dec := jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil
	}
	members := make([]member, 0, 8)
	for dec.PeekKind() != '}' {
		name, ok := readValue(dec, raw)
		if !ok {
			return nil
		}
		v, ok := readValue(dec, raw)
		if !ok {
			return nil
		}
		s, ok := unquote(name)
		if !ok {
			return nil
		}
		members = append(members, member{name: s, raw: v})
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil
	}
	return members
}

// readValue reads the next value (or member name) from dec, which reads
// src, and returns it as a slice of src: what ReadValue returns is only
// valid until the decoder's next call.
func readValue(dec *jsontext.Decoder, src []byte) (jsontext.Value, bool) {
	v, err := dec.ReadValue()
	if err != nil {
		return nil, false
	}
	end := int(dec.InputOffset())
	return src[end-len(v) : end : end], true
}

// child returns the fields of the object member name (nil when absent or
// not an object).
func (f *fields) child(name string) *fields {
	raw, ok := f.get(name)
	if !ok {
		return nil
	}
	c := &fields{prefix: f.path(name), typeErrs: f.typeErrs, semErrs: f.semErrs}
	c.load(raw, c.prefix)
	if c.members == nil {
		return nil
	}
	return c
}

func (f *fields) path(name string) string {
	if f.prefix == "" {
		return name
	}
	return f.prefix + "." + name
}

func (f *fields) typeErr(field, msg string) {
	if field == "" {
		field = "body"
	}
	*f.typeErrs = append(*f.typeErrs, sdk.FieldError{Field: field, Message: msg})
}

// fail records a semantic error on a member of this object.
func (f *fields) fail(name, msg string) {
	*f.semErrs = append(*f.semErrs, sdk.FieldError{Field: f.path(name), Message: msg})
}

// find returns the member name, or nil. It is linear: a send has about a
// dozen members, and even a 64 KiB body of tiny ones (about 10,000) read
// by parseSend's two dozen accessors costs well under a millisecond.
func (f *fields) find(name string) *member {
	for i := range f.members {
		if f.members[i].name == name {
			return &f.members[i]
		}
	}
	return nil
}

func (f *fields) has(name string) bool { return f.find(name) != nil }

// asked reports whether an accessor has read the member name.
func (f *fields) asked(name string) bool {
	m := f.find(name)
	return m != nil && m.asked
}

// get returns the raw value of the member name and marks it read.
func (f *fields) get(name string) (jsontext.Value, bool) {
	m := f.find(name)
	if m == nil {
		return nil, false
	}
	m.asked = true
	return m.raw, true
}

// unquote reads a raw JSON string literal from a checked body; ok is false
// when raw is not a string.
func unquote(raw jsontext.Value) (string, bool) {
	if raw.Kind() != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	b, err := jsontext.AppendUnquote(nil, raw)
	return string(b), err == nil
}

// str reads a string member; ok is false when absent or mistyped.
func (f *fields) str(name string) (string, bool) {
	raw, ok := f.get(name)
	if !ok {
		return "", false
	}
	s, ok := unquote(raw)
	if !ok {
		f.typeErr(f.path(name), "must be a string")
		return "", false
	}
	return s, true
}

// text reads a string member and checks its length in characters (as JSON
// Schema counts them): min 1 when required or given, at most maxLen.
func (f *fields) text(name string, required bool, maxLen int) string {
	s, ok := f.str(name)
	switch {
	case !ok:
		if required && !f.has(name) {
			f.fail(name, "is required")
		}
		return ""
	case s == "":
		f.fail(name, "must not be empty")
	case utf8.RuneCountInString(s) > maxLen:
		f.fail(name, fmt.Sprintf("must be at most %d characters", maxLen))
	}
	return s
}

// integer reads a non-negative integer member no larger than maxVal.
func (f *fields) integer(name string, maxVal int64) (int64, bool) {
	raw, ok := f.get(name)
	if !ok {
		return 0, false
	}
	var n json.Number
	if c := raw[0]; (c != '-' && (c < '0' || c > '9')) || json.Unmarshal(raw, &n) != nil {
		f.typeErr(f.path(name), "must be an integer")
		return 0, false
	}
	v, err := n.Int64()
	if err != nil {
		fl, ferr := n.Float64()
		if ferr != nil || fl != math.Trunc(fl) || math.Abs(fl) > 1<<62 {
			f.typeErr(f.path(name), "must be an integer")
			return 0, false
		}
		v = int64(fl)
	}
	if v < 0 || v > maxVal {
		f.fail(name, fmt.Sprintf("must be between 0 and %d", maxVal))
		return 0, false
	}
	return v, true
}

// boolean reads a boolean member.
func (f *fields) boolean(name string) (bool, bool) {
	raw, ok := f.get(name)
	if !ok {
		return false, false
	}
	var b bool
	if (raw[0] != 't' && raw[0] != 'f') || json.Unmarshal(raw, &b) != nil {
		f.typeErr(f.path(name), "must be a boolean")
		return false, false
	}
	return b, true
}

// strings reads an array of strings.
func (f *fields) strings(name string) ([]string, bool) {
	raw, ok := f.get(name)
	if !ok {
		return nil, false
	}
	dec := jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true))
	if raw.Kind() != '[' {
		f.typeErr(f.path(name), "must be an array of strings")
		return nil, false
	}
	if _, err := dec.ReadToken(); err != nil {
		f.typeErr(f.path(name), "must be an array of strings")
		return nil, false
	}
	var out []string
	good := true
	for i := 0; dec.PeekKind() != ']'; i++ {
		it, ok := readValue(dec, raw)
		if !ok {
			f.typeErr(f.path(name), "must be an array of strings")
			return nil, false
		}
		s, ok := unquote(it)
		if !ok {
			f.typeErr(fmt.Sprintf("%s[%d]", f.path(name), i), "must be a string")
			good = false
		}
		out = append(out, s)
	}
	if out == nil {
		out = []string{}
	}
	return out, good
}

// unknown reports every member that no accessor asked for, by name.
func (f *fields) unknown() {
	var names []string
	for _, m := range f.members {
		if !m.asked {
			names = append(names, m.name)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		f.typeErr(f.path(n), "unknown field")
	}
}

// problem returns the 400 for type errors, else the 422 for semantic ones,
// else nil.
func (f *fields) problem() *problem {
	if len(*f.typeErrs) > 0 {
		return badRequest(summarize(*f.typeErrs), *f.typeErrs...)
	}
	if len(*f.semErrs) > 0 {
		return invalid(summarize(*f.semErrs), *f.semErrs...)
	}
	return nil
}

// valid reports the members no accessor asked for (unknown) and answers
// the body's problem, if any (400 for type errors, else 422); it reports
// whether the body is valid. Call it once every member has been read and
// checked.
func (f *fields) valid(w http.ResponseWriter) bool {
	f.unknown()
	if prob := f.problem(); prob != nil {
		writeProblem(w, prob)
		return false
	}
	return true
}

// distinctIDs checks the items of the array member name (as read by
// strings): each an id of 1 to maxIDLen characters, none repeating an
// earlier one.
func (f *fields) distinctIDs(name string, items []string) {
	at := map[string]int{}
	for i, it := range items {
		field := fmt.Sprintf("%s[%d]", name, i)
		switch j, dup := at[it]; {
		case it == "":
			f.fail(field, "must not be empty")
		case utf8.RuneCountInString(it) > maxIDLen:
			f.fail(field, fmt.Sprintf("must be at most %d characters", maxIDLen))
		case dup:
			f.fail(field, fmt.Sprintf("repeats %s[%d]", name, j))
		}
		at[it] = i
	}
}

func summarize(errs []sdk.FieldError) string {
	parts := make([]string, 0, min(len(errs), 3))
	for i, e := range errs {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(errs)-3))
			break
		}
		parts = append(parts, e.Field+" "+e.Message)
	}
	return strings.Join(parts, "; ")
}
