package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var pyIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var pyKeywords = map[string]bool{}

func init() {
	for _, k := range strings.Fields(`False None True and as assert async await break class continue def del elif else
		except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield`) {
		pyKeywords[k] = true
	}
}

// python renders the model as TypedDicts (the JSON members keep their wire
// names) and aliases.
func python(m *model, header string) ([]byte, error) {
	var b, aliases strings.Builder
	b.WriteString(header)
	var names []string
	for _, d := range m.decls {
		names = append(names, d.name)
		if d.alias != nil || len(d.fields) == 0 {
			t := d.alias
			if t == nil {
				t = &typ{kind: "any-object"}
				if d.extra != nil {
					t = &typ{kind: "map", elem: d.extra}
				}
			}
			s, err := pyType(t, true)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.name, err)
			}
			aliases.WriteString("\n\n")
			pyComment(&aliases, "", d.desc)
			fmt.Fprintf(&aliases, "%s: TypeAlias = %s\n", d.name, s)
			continue
		}
		classSyntax := true
		for _, f := range d.fields {
			if !pyIdent.MatchString(f.name) || pyKeywords[f.name] {
				classSyntax = false
			}
		}
		b.WriteString("\n\n")
		if !classSyntax {
			pyComment(&b, "", d.desc)
			fmt.Fprintf(&b, "%s = TypedDict(\n    %q,\n    {\n", d.name, d.name)
		} else {
			fmt.Fprintf(&b, "class %s(TypedDict):\n", d.name)
			if d.desc != "" {
				lines := wrap(strings.ReplaceAll(d.desc, `"""`, `\"\"\"`), 88)
				if len(lines) == 1 {
					fmt.Fprintf(&b, "    \"\"\"%s\"\"\"\n\n", lines[0])
				} else {
					fmt.Fprintf(&b, "    \"\"\"%s\n", lines[0])
					for _, l := range lines[1:] {
						fmt.Fprintf(&b, "    %s\n", l)
					}
					b.WriteString("    \"\"\"\n\n")
				}
			}
		}
		for _, f := range d.fields {
			// The functional syntax evaluates its field types when the
			// module loads: a type declared further down is quoted.
			s, err := pyType(f.t, !classSyntax)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", d.name, f.name, err)
			}
			if !f.required {
				s = "NotRequired[" + s + "]"
			}
			if classSyntax {
				pyComment(&b, "    ", f.desc)
				fmt.Fprintf(&b, "    %s: %s\n", f.name, s)
			} else {
				pyComment(&b, "        ", f.desc)
				fmt.Fprintf(&b, "        %s: %s,\n", strconv.Quote(f.name), s)
			}
		}
		if !classSyntax {
			b.WriteString("    },\n)\n")
		}
	}
	b.WriteString(aliases.String())
	b.WriteString("\n\n__all__ = [\n")
	for _, n := range names {
		fmt.Fprintf(&b, "    %q,\n", n)
	}
	b.WriteString("]\n")
	return []byte(b.String()), nil
}

// pyType is t as a Python annotation; runtime is true for an alias's
// right-hand side, which runs (so unions use Union[...]).
func pyType(t *typ, runtime bool) (string, error) {
	switch t.kind {
	case "ref":
		if runtime {
			return strconv.Quote(t.ref), nil
		}
		return t.ref, nil
	case "string":
		return "str", nil
	case "integer":
		return "int", nil
	case "number":
		return "float", nil
	case "boolean":
		return "bool", nil
	case "null":
		return "None", nil
	case "unknown":
		return "Any", nil
	case "any-object":
		return "dict[str, Any]", nil
	case "enum":
		parts := make([]string, len(t.enum))
		for i, e := range t.enum {
			parts[i] = strconv.Quote(e)
		}
		return "Literal[" + strings.Join(parts, ", ") + "]", nil
	case "array":
		e, err := pyType(t.elem, runtime)
		if err != nil {
			return "", err
		}
		return "list[" + e + "]", nil
	case "map":
		e, err := pyType(t.elem, runtime)
		if err != nil {
			return "", err
		}
		return "dict[str, " + e + "]", nil
	case "union":
		parts := make([]string, len(t.union))
		for i, u := range t.union {
			s, err := pyType(u, runtime)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return "Union[" + strings.Join(parts, ", ") + "]", nil
	}
	return "", fmt.Errorf("no Python for %q", t.kind)
}

func pyComment(b *strings.Builder, indent, desc string) {
	if desc == "" {
		return
	}
	for _, l := range wrap(desc, 96-len(indent)) {
		fmt.Fprintf(b, "%s#: %s\n", indent, l)
	}
}
