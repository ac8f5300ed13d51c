package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommittedTypesAreGeneratedFromOpenAPI is the drift check: the Node
// and Python SDKs' committed wire types are exactly what the generator
// makes of the committed api/openapi.json.
func TestCommittedTypesAreGeneratedFromOpenAPI(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, openAPIPath))
	if err != nil {
		t.Fatal(err)
	}
	files, err := generate(doc)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		t.Run(path+" is up to date", func(t *testing.T) {
			got, err := os.ReadFile(filepath.Join(root, path))
			if err != nil {
				t.Fatalf("%v (run go run ./sdk/gen from the repository's root)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s differs from what api/openapi.json generates: run go run ./sdk/gen from the repository's root", path)
			}
		})
	}
}

func TestEverySchemaBecomesADeclarationInBothLanguages(t *testing.T) {
	doc := []byte(`{"components":{"schemas":{
		"Thing":{"type":"object","required":["id"],"description":"A thing.","properties":{
			"id":{"type":"string","description":"Its id."},
			"kind":{"type":"string","enum":["a","b"]},
			"n":{"type":"integer"},
			"tags":{"type":"array","items":{"type":"string"}},
			"flags":{"type":"object","additionalProperties":{"type":"boolean"}},
			"key":{"type":"object","additionalProperties":{"type":["string","number"]}},
			"payload":{},
			"inner":{"type":"object","required":["x"],"properties":{"x":{"type":"number"}}},
			"other":{"$ref":"#/components/schemas/Other"}}},
		"Other":{"type":"object","properties":{"from":{"type":"boolean"}}},
		"Either":{"oneOf":[{"$ref":"#/components/schemas/Thing"},{"$ref":"#/components/schemas/Other"}]}}}}`)
	m, err := build(mustParse(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := typescript(m, "")
	if err != nil {
		t.Fatal(err)
	}
	py, err := python(m, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"/** A thing. */\nexport interface Thing {",
		"  /** Its id. */\n  id: string;",
		`  kind?: "a" | "b";`,
		"  n?: number;",
		"  tags?: string[];",
		"  flags?: Record<string, boolean>;",
		"  key?: Record<string, string | number>;",
		"  payload?: unknown;",
		"  inner?: ThingInner;",
		"export interface ThingInner {\n  x: number;\n}",
		"  other?: Other;",
		"export type Either = Thing | Other;",
	} {
		if !strings.Contains(string(ts), want) {
			t.Errorf("TypeScript lacks %q:\n%s", want, ts)
		}
	}
	for _, want := range []string{
		"class Thing(TypedDict):\n    \"\"\"A thing.\"\"\"\n",
		"    #: Its id.\n    id: str\n",
		`    kind: NotRequired[Literal["a", "b"]]`,
		"    n: NotRequired[int]",
		"    tags: NotRequired[list[str]]",
		"    flags: NotRequired[dict[str, bool]]",
		"    key: NotRequired[dict[str, Union[str, float]]]",
		"    payload: NotRequired[Any]",
		"    inner: NotRequired[ThingInner]",
		"class ThingInner(TypedDict):\n    x: float\n",
		"Other = TypedDict(\n    \"Other\",\n    {\n        \"from\": NotRequired[bool],\n    },\n)",
		`Either: TypeAlias = Union["Thing", "Other"]`,
	} {
		if !strings.Contains(string(py), want) {
			t.Errorf("Python lacks %q:\n%s", want, py)
		}
	}
}

func TestAnUnsupportedSchemaIsAnError(t *testing.T) {
	for name, doc := range map[string]string{
		"a $ref outside components.schemas": `{"components":{"schemas":{"A":{"type":"object","properties":{"x":{"$ref":"other.json#/A"}}}}}}`,
		"a type JSON Schema does not have":  `{"components":{"schemas":{"A":{"type":"object","properties":{"x":{"type":"date"}}}}}}`,
		"an enum of numbers":                `{"components":{"schemas":{"A":{"type":"object","properties":{"x":{"enum":[1,2]}}}}}}`,
		"no schemas":                        `{"components":{}}`,
	} {
		t.Run(name+" is refused", func(t *testing.T) {
			if _, err := generate([]byte(doc)); err == nil {
				t.Fatal("generated")
			}
		})
	}
}

func mustParse(t *testing.T, b []byte) *node {
	t.Helper()
	n, err := parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
