package api

import (
	_ "embed"
	"net/http"
)

// openAPI is api/openapi.json: the OpenAPI 3.1 document of every route, kept
// in the repository and checked against the router by a test.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document served at /openapi.json.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

func (s *Server) getOpenAPI(w http.ResponseWriter, _ *http.Request, _ principal) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(openAPI)
}
