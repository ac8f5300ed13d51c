package api

import (
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

// The handlers of the stored resources (devices, preferences, segments,
// webhooks) share one shape, written here once:
//
//   - GET and DELETE read their path with readyPath, look the record up in
//     the replica and answer with writeFound or deleteRecord.
//   - PUT reads its path with pathParam and its body with readObject,
//     checks the body with fields.valid before replicaReady (a bad body is
//     a 400 or 422 even while the replica loads), writes the record with put
//     and applies it to the replica.

// pathID reads a path parameter: a user or device id of 1 to 256
// characters of valid UTF-8.
func pathID(r *http.Request, name string) (string, *problem) {
	v := r.PathValue(name)
	field := "path:" + name
	switch {
	case !utf8.ValidString(v):
		return "", badRequest(name+" is not valid UTF-8", sdk.FieldError{Field: field, Message: "invalid UTF-8"})
	case v == "":
		return "", invalid(name+" is empty", sdk.FieldError{Field: field, Message: "must not be empty"})
	case utf8.RuneCountInString(v) > maxIDLen:
		return "", invalid(name+" is too long", sdk.FieldError{Field: field, Message: fmt.Sprintf("must be at most %d characters", maxIDLen)})
	}
	return v, nil
}

// pathParam reads the path parameter name (see pathID), answering the
// problem when it is bad.
func pathParam(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	v, prob := pathID(r, name)
	if prob != nil {
		writeProblem(w, prob)
		return "", false
	}
	return v, true
}

// readyPath reads the path parameter name and checks the replica is
// ready, answering the problem otherwise.
func (s *Server) readyPath(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	v, ok := pathParam(w, r, name)
	return v, ok && s.replicaReady(w)
}

// readObject reads a JSON object body, answering the problem when it is
// not one.
func (s *Server) readObject(w http.ResponseWriter, r *http.Request) (*fields, bool) {
	body, prob := readJSON(w, r, s.cfg.MaxBodyBytes)
	if prob != nil {
		writeProblem(w, prob)
		return nil, false
	}
	f := newFields(body, "")
	if f.members == nil {
		writeProblem(w, f.problem())
		return nil, false
	}
	return f, true
}

// replicaReady answers 503 while the device, preference and segment replica
// loads.
func (s *Server) replicaReady(w http.ResponseWriter) bool {
	if !s.running() || !s.rep.ready.Load() {
		writeProblem(w, unavailable("the device, preference and segment index is still loading; retry shortly", 1))
		return false
	}
	return true
}

// put commits one record of a compacted topic under key: v, or a tombstone
// when v is nil. On failure it answers the problem and returns false.
func (s *Server) put(w http.ResponseWriter, r *http.Request, topic, key string, v schemas.Record) bool {
	rec := &kgo.Record{Topic: topic, Key: []byte(key), Timestamp: time.Now()}
	if v != nil {
		b, err := schemas.Encode(v)
		if err != nil {
			writeProblem(w, invalid(err.Error()))
			return false
		}
		rec.Value = b
		rec.Headers = []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(v.SchemaName())}}
	}
	if err := s.w.write(r.Context(), []*kgo.Record{rec}); err != nil {
		s.log.Warn("write failed", "topic", rec.Topic, "err", err)
		writeProblem(w, unavailable("the change was not written; retry", 1))
		return false
	}
	return true
}

// writeFound answers a GET: 200 with out(v), or 404 naming what when the
// record was not found.
func writeFound[T, O any](w http.ResponseWriter, found bool, what string, v T, out func(T) O) {
	if !found {
		writeProblem(w, notFound(what))
		return
	}
	writeJSON(w, http.StatusOK, out(v))
}

// deleteRecord answers a DELETE: 404 naming what when the record was not
// found; otherwise it commits key's tombstone to topic, applies the
// deletion to the replica (apply(key, nil), the replica's put method of
// the resource) and answers 204.
func deleteRecord[T any](s *Server, w http.ResponseWriter, r *http.Request, found bool, what, topic, key string, apply func(key string, v *T)) {
	if !found {
		writeProblem(w, notFound(what))
		return
	}
	if !s.put(w, r, topic, key, nil) {
		return
	}
	apply(key, nil)
	w.WriteHeader(http.StatusNoContent)
}
