package api

import (
	"bytes"
	"context"
	"errors"
	"html"
	"net/http"
	"strconv"
	"time"

	"github.com/heraldhq/herald/analytics/dashboard"
	"github.com/heraldhq/herald/sdk"
)

// The dashboard (package analytics/dashboard): GET /dashboard is the page
// and GET /dashboard/assets/{name} its script, style and Chart.js, all
// public (they hold no data). The page reads the JSON endpoints under
// /v1/dashboard/, which take an API key like every other route and answer
// for the key's tenant only: each runs an analysts' query narrowed to that
// tenant, and the timeline selects the tenant's rows. The page asks for
// the key and keeps it in the browser tab's session storage.
//
// Each endpoint takes since and until (RFC 3339; the last 7 days by
// default, at most maxDashboardSpan, within 1970..2100; given empty, they
// are malformed), widened to whole hours since the
// roll-ups are hourly. Without Config.Dashboard they answer 503 with the
// problem type dashboard-not-configured; when ClickHouse fails, 503
// unavailable with Retry-After.

const (
	probDashboardNotConfigured = problemBase + "dashboard-not-configured"
	defaultDashboardSpan       = 7 * 24 * time.Hour
	maxDashboardSpan           = 400 * 24 * time.Hour
	defaultShownTwiceLimit     = 100
	maxShownTwiceLimit         = 1000
)

// The audit tables' DateTime columns hold 1970 to 2106; the window stays
// inside.
var (
	minDashboardTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDashboardTime = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

// getDashboardPage serves the page; with DashboardDevKey (herald dev), the
// key field carries it, and the page uses it until the user gives another.
func (s *Server) getDashboardPage(w http.ResponseWriter, _ *http.Request, _ principal) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	// Everything the page loads comes from herald itself.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	page := dashboard.Page()
	if k := s.cfg.DashboardDevKey; k != "" {
		page = bytes.Replace(page, []byte(`<input id="api-key"`), []byte(`<input id="api-key" data-dev-key="`+html.EscapeString(k)+`"`), 1)
	}
	w.Write(page)
}

func (s *Server) getDashboardAsset(w http.ResponseWriter, r *http.Request, _ principal) {
	a, body, ok := dashboard.AssetNamed(r.PathValue("name"))
	if !ok {
		writeProblem(w, notFound("dashboard asset "+strconv.Quote(r.PathValue("name"))))
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.ContentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// DashboardWindow is the time range of a dashboard answer.
type DashboardWindow struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
}

// dashboardWindow reads since and until, answering a problem when they are
// malformed.
func (s *Server) dashboardWindow(w http.ResponseWriter, r *http.Request) (dashboard.Window, bool) {
	q := r.URL.Query()
	until := s.cfg.Now()
	if q.Has("until") {
		t, err := time.Parse(time.RFC3339, q.Get("until"))
		if err != nil {
			writeProblem(w, invalid("until must be an RFC 3339 time", sdk.FieldError{Field: "query:until", Message: "not an RFC 3339 time"}))
			return dashboard.Window{}, false
		}
		until = t
	}
	since := until.Add(-defaultDashboardSpan)
	if q.Has("since") {
		t, err := time.Parse(time.RFC3339, q.Get("since"))
		if err != nil {
			writeProblem(w, invalid("since must be an RFC 3339 time", sdk.FieldError{Field: "query:since", Message: "not an RFC 3339 time"}))
			return dashboard.Window{}, false
		}
		since = t
	}
	if since.Before(minDashboardTime) || until.After(maxDashboardTime) {
		writeProblem(w, invalid("since and until must be between 1970 and 2100", sdk.FieldError{Field: "query:since", Message: "out of range"}))
		return dashboard.Window{}, false
	}
	if !since.Before(until) || until.Sub(since) > maxDashboardSpan {
		writeProblem(w, invalid("since must be before until, at most 400 days apart", sdk.FieldError{Field: "query:since", Message: "not before until, or too far back"}))
		return dashboard.Window{}, false
	}
	return dashboard.Hours(since, until), true
}

// dashboardFailed answers the problem of a failed dashboard read.
func (s *Server) dashboardFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, dashboard.ErrNotConfigured) {
		writeProblem(w, newProblem(http.StatusServiceUnavailable, probDashboardNotConfigured, "Dashboard not configured",
			"the dashboard reads the audit record in ClickHouse, and this server has no ClickHouse connection: "+
				"start herald api with --clickhouse-addr and --database (HERALD_CLICKHOUSE_ADDR, HERALD_DATABASE)"))
		return
	}
	if r.Context().Err() == nil {
		s.log.Error("dashboard read failed", "path", r.URL.Path, "err", err)
	}
	writeProblem(w, unavailable("the audit record in ClickHouse could not be read; retry later", 5))
}

// dashboardRead runs one read of the dashboard in the request's window and
// answers {since, until, <field>: rows}.
func dashboardRead[T any](s *Server, w http.ResponseWriter, r *http.Request, p principal, field string,
	read func(src *dashboard.Source, ctx context.Context, tenant string, win dashboard.Window) (T, error)) {
	win, ok := s.dashboardWindow(w, r)
	if !ok {
		return
	}
	rows, err := read(s.cfg.Dashboard, r.Context(), p.tenant, win)
	if err != nil {
		s.dashboardFailed(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"since": win.Since, "until": win.Until, field: rows})
}

func (s *Server) getDashboardHitRate(w http.ResponseWriter, r *http.Request, p principal) {
	dashboardRead(s, w, r, p, "series", (*dashboard.Source).HitRate)
}

func (s *Server) getDashboardDecisions(w http.ResponseWriter, r *http.Request, p principal) {
	dashboardRead(s, w, r, p, "reasons", (*dashboard.Source).Decisions)
}

func (s *Server) getDashboardAttempts(w http.ResponseWriter, r *http.Request, p principal) {
	dashboardRead(s, w, r, p, "attempts", (*dashboard.Source).Attempts)
}

func (s *Server) getDashboardOutcomes(w http.ResponseWriter, r *http.Request, p principal) {
	dashboardRead(s, w, r, p, "outcomes", (*dashboard.Source).Outcomes)
}

// DashboardShownTwice is the answer of GET /v1/dashboard/shown-twice.
type DashboardShownTwice struct {
	DashboardWindow
	Deliveries []dashboard.MaybeShownTwice `json:"deliveries"`
	// Truncated says more deliveries matched than limit.
	Truncated bool `json:"truncated"`
}

func (s *Server) getDashboardShownTwice(w http.ResponseWriter, r *http.Request, p principal) {
	limit := defaultShownTwiceLimit
	if q := r.URL.Query(); q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > maxShownTwiceLimit {
			writeProblem(w, invalid("limit must be an integer from 1 to "+strconv.Itoa(maxShownTwiceLimit),
				sdk.FieldError{Field: "query:limit", Message: "must be 1.." + strconv.Itoa(maxShownTwiceLimit)}))
			return
		}
		limit = n
	}
	win, ok := s.dashboardWindow(w, r)
	if !ok {
		return
	}
	rows, more, err := s.cfg.Dashboard.ShownTwice(r.Context(), p.tenant, win, limit)
	if err != nil {
		s.dashboardFailed(w, r, err)
		return
	}
	if rows == nil {
		rows = []dashboard.MaybeShownTwice{}
	}
	writeJSON(w, http.StatusOK, DashboardShownTwice{DashboardWindow{win.Since, win.Until}, rows, more})
}

func (s *Server) getDashboardTimeline(w http.ResponseWriter, r *http.Request, p principal) {
	id := r.PathValue("id")
	tl, err := s.cfg.Dashboard.Timeline(r.Context(), p.tenant, id)
	if err != nil {
		s.dashboardFailed(w, r, err)
		return
	}
	if tl == nil {
		// Another tenant's notification is not found either.
		writeProblem(w, newProblem(http.StatusNotFound, probNotFound, "Not found",
			"herald holds nothing for this id: notification "+strconv.Quote(id)+" is not in the audit record of this key's tenant"))
		return
	}
	writeJSON(w, http.StatusOK, tl)
}
