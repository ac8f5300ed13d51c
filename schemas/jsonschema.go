package schemas

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/invopop/jsonschema"
)

// JSONSchemaFile is the file name, under schemas/jsonschema/, of the JSON
// Schema of the record named name ("herald.request/v1" →
// "herald.request.v1.json").
func JSONSchemaFile(name string) string {
	return strings.ReplaceAll(name, "/", ".") + ".json"
}

// JSONSchema returns the JSON Schema (draft 2020-12) of r, generated from its
// Go type: the document producers in other languages validate against.
func JSONSchema(r Record) ([]byte, error) {
	ref := jsonschema.Reflector{
		ExpandedStruct:            true,
		DoNotReference:            true,
		AllowAdditionalProperties: true, // minor versions add optional fields
	}
	s := ref.Reflect(r)
	s.ID = jsonschema.ID("https://herald.dev/schemas/" + JSONSchemaFile(r.SchemaName()))
	s.Title = r.SchemaName()
	if p, ok := s.Properties.Get("schema"); ok {
		p.Const = r.SchemaName()
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("schemas: json schema of %s: %w", r.SchemaName(), err)
	}
	return append(b, '\n'), nil
}
