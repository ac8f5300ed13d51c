package api

import (
	"net/http"
	"time"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

func segmentOut(sg schemas.Segment) sdk.Segment {
	out := sdk.Segment{Name: sg.Name, Members: sg.Members, UpdatedAt: sg.UpdatedAt}
	if out.Members == nil {
		out.Members = []string{}
	}
	return out
}

func (s *Server) getSegment(w http.ResponseWriter, r *http.Request, p principal) {
	name, ok := s.readyPath(w, r, "name")
	if !ok {
		return
	}
	sg, found := s.rep.segment(p.tenant, name)
	writeFound(w, found, "segment", sg, segmentOut)
}

// putSegment replaces a segment's members (creating the segment).
func (s *Server) putSegment(w http.ResponseWriter, r *http.Request, p principal) {
	name, ok := pathParam(w, r, "name")
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
		f.distinctIDs("members", members)
		sg.Members = members
	case !f.has("members"):
		f.fail("members", "is required (an empty list empties the segment)")
	}
	if !f.valid(w) || !s.replicaReady(w) {
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
	name, ok := s.readyPath(w, r, "name")
	if !ok {
		return
	}
	_, found := s.rep.segment(p.tenant, name)
	deleteRecord(s, w, r, found, "segment", s.segmentsT, schemas.RecipientKey(p.tenant, name), s.rep.putSegment)
}
