package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var tsIdent = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// typescript renders the model as TypeScript declarations.
func typescript(m *model, header string) ([]byte, error) {
	var b strings.Builder
	b.WriteString(header)
	for _, d := range m.decls {
		b.WriteString("\n")
		tsDoc(&b, "", d.desc)
		if d.alias != nil {
			t, err := tsType(d.alias)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.name, err)
			}
			fmt.Fprintf(&b, "export type %s = %s;\n", d.name, t)
			continue
		}
		fmt.Fprintf(&b, "export interface %s {\n", d.name)
		for _, f := range d.fields {
			t, err := tsType(f.t)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", d.name, f.name, err)
			}
			tsDoc(&b, "  ", f.desc)
			name := f.name
			if !tsIdent.MatchString(name) {
				name = strconv.Quote(name)
			}
			opt := "?"
			if f.required {
				opt = ""
			}
			fmt.Fprintf(&b, "  %s%s: %s;\n", name, opt, t)
		}
		if d.extra != nil {
			t, err := tsType(d.extra)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.name, err)
			}
			if len(d.fields) > 0 {
				t = "unknown" // an index signature must admit the listed fields
			}
			fmt.Fprintf(&b, "  [name: string]: %s;\n", t)
		}
		b.WriteString("}\n")
	}
	return []byte(b.String()), nil
}

func tsType(t *typ) (string, error) {
	switch t.kind {
	case "ref":
		return t.ref, nil
	case "string":
		return "string", nil
	case "integer", "number":
		return "number", nil
	case "boolean":
		return "boolean", nil
	case "null":
		return "null", nil
	case "unknown":
		return "unknown", nil
	case "any-object":
		return "Record<string, unknown>", nil
	case "enum":
		parts := make([]string, len(t.enum))
		for i, e := range t.enum {
			parts[i] = strconv.Quote(e)
		}
		return strings.Join(parts, " | "), nil
	case "array":
		e, err := tsType(t.elem)
		if err != nil {
			return "", err
		}
		if strings.Contains(e, " ") {
			e = "(" + e + ")"
		}
		return e + "[]", nil
	case "map":
		e, err := tsType(t.elem)
		if err != nil {
			return "", err
		}
		return "Record<string, " + e + ">", nil
	case "union":
		parts := make([]string, len(t.union))
		for i, u := range t.union {
			s, err := tsType(u)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, " | "), nil
	}
	return "", fmt.Errorf("no TypeScript for %q", t.kind)
}

func tsDoc(b *strings.Builder, indent, desc string) {
	if desc == "" {
		return
	}
	desc = strings.ReplaceAll(desc, "*/", "*\\/")
	lines := wrap(desc, 96-len(indent))
	if len(lines) == 1 {
		fmt.Fprintf(b, "%s/** %s */\n", indent, lines[0])
		return
	}
	fmt.Fprintf(b, "%s/**\n", indent)
	for _, l := range lines {
		fmt.Fprintf(b, "%s * %s\n", indent, l)
	}
	fmt.Fprintf(b, "%s */\n", indent)
}
