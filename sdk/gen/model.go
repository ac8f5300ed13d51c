package main

import (
	"fmt"
	"strings"
	"unicode"
)

// typ is a JSON Schema type as the generators render it.
type typ struct {
	kind  string // ref, string, integer, number, boolean, unknown, any-object, array, map, union, enum
	ref   string // kind ref: a declaration's name
	enum  []string
	elem  *typ   // kind array: the items; kind map: the values
	union []*typ // kind union
}

// field is one property of an object.
type field struct {
	name     string
	t        *typ
	required bool
	desc     string
}

// decl is one named type: an object (fields) or an alias (of a union).
type decl struct {
	name   string
	desc   string
	fields []field
	// extra is the type of members not listed (additionalProperties with a
	// schema), or nil.
	extra *typ
	alias *typ
}

// model is every declaration of components.schemas, in document order,
// with the inline objects named after where they are (Parent + Property)
// and listed after their parent.
type model struct {
	decls []*decl
}

func build(doc *node) (*model, error) {
	schemas := doc.get("components").get("schemas")
	if schemas == nil || schemas.kind != kindObject {
		return nil, fmt.Errorf("no components.schemas")
	}
	m := &model{}
	for _, s := range schemas.obj {
		if err := m.declare(s.key, s.val); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// declare adds a named declaration for schema s.
func (m *model) declare(name string, s *node) error {
	d := &decl{name: name, desc: s.get("description").str()}
	m.decls = append(m.decls, d)
	if alts := s.get("oneOf"); alts != nil && s.get("properties") == nil {
		t := &typ{kind: "union"}
		for i, a := range alts.arr {
			at, err := m.typeOf(fmt.Sprintf("%sOption%d", name, i+1), a)
			if err != nil {
				return fmt.Errorf("%s.oneOf[%d]: %w", name, i, err)
			}
			t.union = append(t.union, at)
		}
		d.alias = t
		return nil
	}
	if types := s.get("type").strs(); len(types) != 1 || types[0] != "object" {
		t, err := m.typeOf(name+"Value", s)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		d.alias = t
		return nil
	}
	required := map[string]bool{}
	for _, r := range s.get("required").strs() {
		required[r] = true
	}
	if props := s.get("properties"); props != nil {
		for _, p := range props.obj {
			ft, err := m.typeOf(name+pascal(p.key), p.val)
			if err != nil {
				return fmt.Errorf("%s.%s: %w", name, p.key, err)
			}
			d.fields = append(d.fields, field{name: p.key, t: ft, required: required[p.key], desc: p.val.get("description").str()})
		}
	}
	if ap := s.get("additionalProperties"); ap != nil && ap.kind == kindObject {
		et, err := m.typeOf(name+"Value", ap)
		if err != nil {
			return fmt.Errorf("%s.additionalProperties: %w", name, err)
		}
		d.extra = et
	}
	return nil
}

// typeOf is the type of schema s; an inline object is declared under name.
func (m *model) typeOf(name string, s *node) (*typ, error) {
	if ref := s.get("$ref").str(); ref != "" {
		target, ok := strings.CutPrefix(ref, "#/components/schemas/")
		if !ok {
			return nil, fmt.Errorf("unsupported $ref %s", ref)
		}
		return &typ{kind: "ref", ref: target}, nil
	}
	if alts := s.get("oneOf"); alts != nil {
		t := &typ{kind: "union"}
		for i, a := range alts.arr {
			at, err := m.typeOf(fmt.Sprintf("%sOption%d", name, i+1), a)
			if err != nil {
				return nil, err
			}
			t.union = append(t.union, at)
		}
		return t, nil
	}
	if e := s.get("enum"); e != nil {
		for _, v := range e.arr {
			if _, ok := v.val.(string); !ok {
				return nil, fmt.Errorf("enum of non-strings")
			}
		}
		return &typ{kind: "enum", enum: e.strs()}, nil
	}
	types := s.get("type").strs()
	if len(types) == 0 {
		return &typ{kind: "unknown"}, nil
	}
	if len(types) > 1 {
		t := &typ{kind: "union"}
		for _, k := range types {
			st, err := m.typeOf(name, &node{kind: kindObject, obj: []member{{key: "type", val: &node{kind: kindScalar, val: k}}}})
			if err != nil {
				return nil, err
			}
			t.union = append(t.union, st)
		}
		return t, nil
	}
	switch types[0] {
	case "string", "integer", "number", "boolean", "null":
		return &typ{kind: types[0]}, nil
	case "array":
		items := s.get("items")
		if items == nil {
			return &typ{kind: "array", elem: &typ{kind: "unknown"}}, nil
		}
		et, err := m.typeOf(name, items)
		if err != nil {
			return nil, err
		}
		return &typ{kind: "array", elem: et}, nil
	case "object":
		if s.get("properties") != nil {
			if err := m.declare(name, s); err != nil {
				return nil, err
			}
			return &typ{kind: "ref", ref: name}, nil
		}
		if ap := s.get("additionalProperties"); ap != nil && ap.kind == kindObject {
			et, err := m.typeOf(name+"Value", ap)
			if err != nil {
				return nil, err
			}
			return &typ{kind: "map", elem: et}, nil
		}
		return &typ{kind: "any-object"}, nil
	}
	return nil, fmt.Errorf("unsupported type %q", types[0])
}

// pascal turns a property name into the part of a declaration's name:
// "quietHours" → "QuietHours".
func pascal(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			up = true
			continue
		}
		if up {
			r = unicode.ToUpper(r)
			up = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// wrap breaks text into lines of at most width characters (a word longer
// than width stands alone).
func wrap(text string, width int) []string {
	var lines []string
	var cur strings.Builder
	for _, w := range strings.Fields(text) {
		if cur.Len() > 0 && cur.Len()+1+len(w) > width {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(w)
	}
	if cur.Len() > 0 {
		lines = append(lines, cur.String())
	}
	return lines
}
