package api

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/heraldhq/herald/sdk"
)

// Problem type URIs: stable identifiers of each kind of problem (RFC 9457
// "type"), documented in api/openapi.json.
const (
	problemBase         = "https://herald.dev/problems/"
	probMalformed       = problemBase + "malformed-request"
	probValidation      = problemBase + "validation"
	probTooLarge        = problemBase + "body-too-large"
	probUnauthorized    = problemBase + "unauthorized"
	probNotFound        = problemBase + "not-found"
	probMethod          = problemBase + "method-not-allowed"
	probConflict        = problemBase + "idempotency-conflict"
	probUnavailable     = problemBase + "unavailable"
	probUnsupportedType = problemBase + "unsupported-media-type"
)

// problem is an error answer in the making.
type problem struct {
	sdk.Problem
	retryAfter int // seconds; 0 for none
	header     http.Header
}

func (p *problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail) }

func newProblem(status int, typ, title, detail string, errs ...sdk.FieldError) *problem {
	return &problem{Problem: sdk.Problem{Type: typ, Title: title, Status: status, Detail: detail, Errors: errs}}
}

func badRequest(detail string, errs ...sdk.FieldError) *problem {
	return newProblem(http.StatusBadRequest, probMalformed, "Malformed request", detail, errs...)
}

func invalid(detail string, errs ...sdk.FieldError) *problem {
	return newProblem(http.StatusUnprocessableEntity, probValidation, "Invalid request", detail, errs...)
}

func notFound(what string) *problem {
	return newProblem(http.StatusNotFound, probNotFound, "Not found", what+" not found")
}

func unavailable(detail string, retryAfter int) *problem {
	p := newProblem(http.StatusServiceUnavailable, probUnavailable, "Service unavailable", detail)
	p.retryAfter = retryAfter
	return p
}

// writeProblem answers with p as application/problem+json.
func writeProblem(w http.ResponseWriter, p *problem) {
	h := w.Header()
	for k, vs := range p.header {
		h[k] = vs
	}
	if p.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	if err := json.NewEncoder(w).Encode(p.Problem); err != nil {
		slog.Debug("api: write problem", "err", err)
	}
}

// writeJSON answers with v as application/json.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, newProblem(http.StatusInternalServerError, problemBase+"internal", "Internal error", "could not encode the answer"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
