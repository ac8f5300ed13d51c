package api

import (
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

// segmentPath reads {name}, answering the problem when it is bad.
func segmentPath(w http.ResponseWriter, r *http.Request) (string, bool) {
	name, prob := pathID(r, "name")
	if prob != nil {
		writeProblem(w, prob)
		return "", false
	}
	return name, true
}

func segmentOut(sg schemas.Segment) sdk.Segment {
	out := sdk.Segment{Name: sg.Name, Members: sg.Members, UpdatedAt: sg.UpdatedAt}
	if out.Members == nil {
		out.Members = []string{}
	}
	return out
}

func (s *Server) getSegment(w http.ResponseWriter, r *http.Request, p principal) {
	name, ok := segmentPath(w, r)
	if !ok || !s.replicaReady(w) {
		return
	}
	sg, found := s.rep.segment(p.tenant, name)
	if !found {
		writeProblem(w, notFound("segment"))
		return
	}
	writeJSON(w, http.StatusOK, segmentOut(sg))
}

// putSegment replaces a segment's members (creating the segment).
func (s *Server) putSegment(w http.ResponseWriter, r *http.Request, p principal) {
	name, ok := segmentPath(w, r)
	if !ok {
		return
	}
	f, ok := s.readObject(w, r)
	if !ok {
		return
	}
	sg := schemas.Segment{Tenant: p.tenant, Name: name, Members: []string{}}
	members, ok := f.strings("members")
	switch {
	case ok:
		at := map[string]int{}
		for i, m := range members {
			field := fmt.Sprintf("members[%d]", i)
			switch j, dup := at[m]; {
			case m == "":
				f.fail(field, "must not be empty")
			case utf8.RuneCountInString(m) > maxIDLen:
				f.fail(field, fmt.Sprintf("must be at most %d characters", maxIDLen))
			case dup:
				f.fail(field, fmt.Sprintf("repeats members[%d]", j))
			}
			at[m] = i
		}
		sg.Members = members
	case !f.has("members"):
		f.fail("members", "is required (an empty list empties the segment)")
	}
	f.unknown()
	if prob := f.problem(); prob != nil {
		writeProblem(w, prob)
		return
	}
	if !s.replicaReady(w) {
		return
	}
	now := time.Now()
	sg.UpdatedAt = now.UnixMilli()
	key := schemas.RecipientKey(p.tenant, name)
	if !s.put(w, r, s.segmentsT, key, sg) {
		return
	}
	s.rep.putSegment(key, &sg)
	writeJSON(w, http.StatusOK, segmentOut(sg))
}

func (s *Server) deleteSegment(w http.ResponseWriter, r *http.Request, p principal) {
	name, ok := segmentPath(w, r)
	if !ok || !s.replicaReady(w) {
		return
	}
	if _, found := s.rep.segment(p.tenant, name); !found {
		writeProblem(w, notFound("segment"))
		return
	}
	key := schemas.RecipientKey(p.tenant, name)
	if !s.put(w, r, s.segmentsT, key, nil) {
		return
	}
	s.rep.putSegment(key, nil)
	w.WriteHeader(http.StatusNoContent)
}
