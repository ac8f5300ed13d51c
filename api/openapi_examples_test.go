package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	sjs "github.com/santhosh-tekuri/jsonschema/v6"
)

// TestEveryBodyInTheOpenAPIDocumentHasAnExampleThatFitsItsSchema checks
// api/openapi.json: every request body and every response body (each media
// type with a schema) has an example (or named examples), and each one
// validates against its schema (JSON Schema 2020-12, as OpenAPI 3.1 reads
// it; formats asserted).
func TestEveryBodyInTheOpenAPIDocumentHasAnExampleThatFitsItsSchema(t *testing.T) {
	const base = "https://herald.dev/openapi.json"
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(openAPI))
	if err != nil {
		t.Fatal(err)
	}
	var oas struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &oas); err != nil {
		t.Fatal(err)
	}
	c := sjs.NewCompiler()
	c.DefaultDraft(sjs.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(base, doc); err != nil {
		t.Fatal(err)
	}
	paths := make([]string, 0, len(oas.Paths))
	for p := range oas.Paths {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	bodies := 0
	for _, p := range paths {
		for method, raw := range oas.Paths[p] {
			var op struct {
				RequestBody *struct {
					Content map[string]mediaType `json:"content"`
				} `json:"requestBody"`
				Responses map[string]struct {
					Content map[string]mediaType `json:"content"`
				} `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				continue // path-level parameters
			}
			opPtr := "/paths/" + pointerEscape(p) + "/" + method
			if op.RequestBody != nil {
				for ct, mt := range op.RequestBody.Content {
					bodies++
					checkExamples(t, c, base, fmt.Sprintf("%s %s request %s", strings.ToUpper(method), p, ct),
						opPtr+"/requestBody/content/"+pointerEscape(ct), mt)
				}
			}
			for status, r := range op.Responses {
				for ct, mt := range r.Content {
					bodies++
					checkExamples(t, c, base, fmt.Sprintf("%s %s %s %s", strings.ToUpper(method), p, status, ct),
						opPtr+"/responses/"+status+"/content/"+pointerEscape(ct), mt)
				}
			}
		}
	}
	if bodies < 100 {
		t.Fatalf("found only %d bodies: is the document read right?", bodies)
	}
}

type mediaType struct {
	Schema   json.RawMessage `json:"schema"`
	Example  json.RawMessage `json:"example"`
	Examples map[string]struct {
		Value json.RawMessage `json:"value"`
	} `json:"examples"`
}

func checkExamples(t *testing.T, c *sjs.Compiler, base, name, ptr string, mt mediaType) {
	t.Helper()
	t.Run(name+" has an example that fits its schema", func(t *testing.T) {
		if mt.Schema == nil {
			t.Skip("no schema")
		}
		values := map[string]json.RawMessage{}
		if mt.Example != nil {
			values["example"] = mt.Example
		}
		for k, e := range mt.Examples {
			values["examples."+k] = e.Value
		}
		if len(values) == 0 {
			t.Fatal("no example")
		}
		sch, err := c.Compile(base + "#" + ptr + "/schema")
		if err != nil {
			t.Fatalf("compile the schema: %v", err)
		}
		for k, v := range values {
			inst, err := sjs.UnmarshalJSON(bytes.NewReader(v))
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			if err := sch.Validate(inst); err != nil {
				t.Errorf("%s does not fit the schema: %#v", k, err)
			}
		}
	})
}

// pointerEscape escapes one JSON pointer token (RFC 6901).
func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
