package api

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sinks/deadletters"
	"github.com/heraldhq/herald/topics"
)

// The dead-letter routes (GET /v1/deadletters, GET /v1/deadletters/{id},
// POST /v1/deadletters:redrive, a custom method: a path under
// /v1/deadletters/ would clash with GET /v1/deadletters/{id}) are `herald deadletters` over HTTP,
// scoped to the caller's tenant: a tenant sees and redrives the failed
// deliveries of its own notifications only (stages' dead letters carry no
// tenant and are the operator's, through the command). Each call reads
// herald.deadletters whole (see sinks/deadletters for why the topic and
// not ClickHouse); a redrive is exactly once however often it is posted.

// deadLetterFilter reads the query's filters; the tenant is the caller's.
func deadLetterFilter(r *http.Request, p principal, list bool) (deadletters.Filter, *problem) {
	q := r.URL.Query()
	f := deadletters.Filter{Tenant: p.tenant, Stage: q.Get("stage"), Channel: q.Get("channel"), Class: q.Get("class"),
		Reason: q.Get("error"), Type: q.Get("type")}
	if list {
		f.Redriven = q.Get("redriven")
	}
	// A filter given empty is no filter the caller meant: refused by name,
	// as a value its enum or format does not allow.
	for _, name := range []string{"since", "until", "class", "redriven", "channel"} {
		if q.Has(name) && q.Get(name) == "" {
			return f, invalid(name+" must not be empty", sdk.FieldError{Field: "query:" + name, Message: "must not be empty (omit it for no filter)"})
		}
	}
	if c := q.Get("channel"); c != "" && !slices.Contains(topics.SinkChannels, c) {
		return f, invalid("channel must be one of "+strings.Join(topics.SinkChannels, ", "),
			sdk.FieldError{Field: "query:channel", Message: "must be one of " + strings.Join(topics.SinkChannels, ", ")})
	}
	for _, name := range []string{"since", "until"} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return f, invalid(name+" must be an RFC 3339 time", sdk.FieldError{Field: "query:" + name, Message: "not an RFC 3339 time"})
		}
		if name == "since" {
			f.Since = t
		} else {
			f.Until = t
		}
	}
	if err := f.Check(); err != nil {
		field := "query"
		for _, name := range []string{"class", "redriven", "until"} {
			if strings.HasPrefix(err.Error(), name+" ") {
				field = "query:" + name
			}
		}
		return f, invalid(err.Error(), sdk.FieldError{Field: field, Message: err.Error()})
	}
	return f, nil
}

func (s *Server) deadLetterOpts() []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(s.cfg.Brokers...)}, s.cfg.ClientOpts...)
}

func (s *Server) readDeadLetters(w http.ResponseWriter, r *http.Request, f deadletters.Filter) (*deadletters.Set, bool) {
	set, err := deadletters.Read(r.Context(), s.cfg.Catalog.Name(topics.DeadLetters), f, s.deadLetterOpts()...)
	if err != nil {
		if r.Context().Err() == nil {
			s.log.Error("dead letters unreadable", "err", err)
		}
		writeProblem(w, unavailable("herald.deadletters could not be read; retry later", 5))
		return nil, false
	}
	return set, true
}

// listDeadLetters answers the tenant's dead letters, oldest first, and
// their counts by stage, class and reason.
func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request, p principal) {
	f, prob := deadLetterFilter(r, p, true)
	if prob != nil {
		writeProblem(w, prob)
		return
	}
	set, ok := s.readDeadLetters(w, r, f)
	if !ok {
		return
	}
	letters := set.Select(f)
	counts := deadletters.Counts(letters)
	if letters == nil {
		letters = []*deadletters.Letter{}
	}
	if counts == nil {
		counts = []deadletters.Count{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"deadLetters": letters, "counts": counts})
}

// getDeadLetter answers one dead letter of the tenant, its input (secrets
// masked) and, when the server reads ClickHouse, its notification's
// timeline.
func (s *Server) getDeadLetter(w http.ResponseWriter, r *http.Request, p principal) {
	id := r.PathValue("id")
	if !deadletters.ValidID(id) {
		writeProblem(w, invalid("id must be a dead letter id: <partition>-<offset>", sdk.FieldError{Field: "path:id", Message: "not <partition>-<offset>"}))
		return
	}
	set, ok := s.readDeadLetters(w, r, deadletters.Filter{IDs: []string{id}, Tenant: p.tenant})
	if !ok {
		return
	}
	l := set.Get(id)
	if l == nil || l.Tenant != p.tenant {
		writeProblem(w, notFound("dead letter "+id))
		return
	}
	out := map[string]any{"deadLetter": l, "input": l.Input()}
	if l.NotificationID != "" && s.cfg.Dashboard != nil {
		if tl, err := s.cfg.Dashboard.Timeline(r.Context(), p.tenant, l.NotificationID); err == nil && tl != nil {
			out["timeline"] = tl
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// postDeadLettersRedrive redrives the tenant's dead letters the body
// selects (ids, or the filters of the list) back to their sinks: exactly
// once, audited with reason and by (the API key's name by default).
func (s *Server) postDeadLettersRedrive(w http.ResponseWriter, r *http.Request, p principal) {
	f, ok := s.readObject(w, r)
	if !ok {
		return
	}
	var sel deadletters.Filter
	sel.Stage = f.text("stage", false, 64)
	sel.Channel = f.text("channel", false, 32)
	sel.Class = f.text("class", false, 32)
	sel.Reason = f.text("error", false, 256)
	sel.Type = f.text("type", false, 256)
	reason := f.text("reason", true, 1024)
	by := f.text("by", false, 256)
	if by == "" {
		by = "api-key:" + p.name
	}
	if ids, ok := f.strings("ids"); ok {
		for i, id := range ids {
			if !deadletters.ValidID(id) {
				f.fail("ids["+strconv.Itoa(i)+"]", "must be a dead letter id: <partition>-<offset>")
			}
		}
		sel.IDs = ids
		if len(ids) == 0 {
			f.fail("ids", "must name at least one dead letter; leave it out to select by the filters")
		}
	}
	for _, name := range []string{"since", "until"} {
		v := f.text(name, false, 64)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			f.fail(name, "must be an RFC 3339 time")
		} else if name == "since" {
			sel.Since = t
		} else {
			sel.Until = t
		}
	}
	dry, _ := f.boolean("dryRun")
	f.unknown()
	if prob := f.problem(); prob != nil {
		writeProblem(w, prob)
		return
	}
	sel.Tenant = p.tenant
	if err := sel.Check(); err != nil {
		field, _, _ := strings.Cut(err.Error(), " ")
		writeProblem(w, invalid(err.Error(), sdk.FieldError{Field: field, Message: err.Error()}))
		return
	}
	rep, err := deadletters.Redrive{ClientOpts: s.deadLetterOpts(), Catalog: s.cfg.Catalog, Filter: sel, By: by, Reason: reason,
		DryRun: dry}.Run(r.Context())
	if err != nil {
		if r.Context().Err() == nil {
			s.log.Error("redrive failed", "err", err)
		}
		// Fenced by another redrive, or the broker out of reach: what
		// committed is marked redriven, the rest is not; a repeat redrives
		// the rest.
		writeProblem(w, unavailable("the redrive could not be written whole (another redrive may have started meanwhile); post it again: what was redriven is skipped", 5))
		return
	}
	if rep.Redriven == nil {
		rep.Redriven = []*deadletters.Letter{}
	}
	if rep.Skipped == nil {
		rep.Skipped = []deadletters.Skip{}
	}
	writeJSON(w, http.StatusOK, rep)
}
