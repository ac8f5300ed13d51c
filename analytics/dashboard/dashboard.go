// Package dashboard owns herald's dashboard: the page (static files
// embedded in the binary: the HTML, its script and style, and Chart.js,
// vendored under static/vendor/chartjs with its license and VERSION by
// scripts/dashboard/vendor-chartjs; nothing is loaded from a CDN) and its
// data, one tenant's answers to the dashboard's questions:
//
//   - the dedup hit rate per type and hour (query hit_rate_hourly),
//   - every stage's decisions by reason (decisions_by_reason),
//   - provider attempts by channel and result (attempts_by_channel),
//   - final delivery states by channel and status (outcomes_by_channel),
//   - the deliveries that may have been shown twice (maybe_shown_twice),
//   - one notification's timeline and verdict (analytics/audit).
//
// Each answer is one analysts' query of analytics/queries, run narrowed to
// the tenant (queries.Query.ForTenant), and the timeline is audit.Load with
// the tenant in its selector: a tenant sees only its own rows. The API
// serves the page and the answers (see package api: the JSON endpoints take
// an API key like every other route, and the tenant is the key's).
package dashboard

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/analytics/queries"
)

//go:embed static
var static embed.FS

// Asset is one static file of the page.
type Asset struct {
	// Name is the file's name under the page's assets path.
	Name string
	// ContentType is what it is served as.
	ContentType string
	path        string
}

// assets are the page's static files, by the name they are served under.
var assets = []Asset{
	{"dashboard.js", "text/javascript; charset=utf-8", "static/dashboard.js"},
	{"dashboard.css", "text/css; charset=utf-8", "static/dashboard.css"},
	{"chart.umd.min.js", "text/javascript; charset=utf-8", "static/vendor/chartjs/chart.umd.min.js"},
	{"chart.js-LICENSE.md", "text/plain; charset=utf-8", "static/vendor/chartjs/LICENSE.md"},
	{"chart.js-VERSION", "text/plain; charset=utf-8", "static/vendor/chartjs/VERSION"},
}

// Page returns the dashboard's HTML.
func Page() []byte {
	b, err := static.ReadFile("static/index.html")
	if err != nil {
		panic("dashboard: index.html is not embedded: " + err.Error())
	}
	return b
}

// AssetNamed returns the static file served under name, and false when there
// is none.
func AssetNamed(name string) (Asset, []byte, bool) {
	for _, a := range assets {
		if a.Name == name {
			b, err := fs.ReadFile(static, a.path)
			if err != nil {
				return Asset{}, nil, false
			}
			return a, b, true
		}
	}
	return Asset{}, nil, false
}

// Source answers the dashboard's questions from ClickHouse.
type Source struct {
	// Conn's default database must be Database: the analysts' queries name
	// their tables unqualified.
	Conn     driver.Conn
	Database string
}

// Window is the time range [Since, Until) of an answer. The roll-ups are
// hourly: give whole hours (Hours rounds).
type Window struct{ Since, Until time.Time }

// Hours returns the window of the whole hours that cover [since, until).
func Hours(since, until time.Time) Window {
	u := until.UTC().Truncate(time.Hour)
	if u.Before(until) {
		u = u.Add(time.Hour)
	}
	return Window{Since: since.UTC().Truncate(time.Hour), Until: u}
}

func (w Window) params() map[string]string {
	return map[string]string{"since": queries.Time(w.Since), "until": queries.Time(w.Until)}
}

// HitRateSeries is the dedup hit rate of one type, hour by hour (hours
// with no hit and no miss are left out).
type HitRateSeries struct {
	Type   string         `json:"type"`
	Points []HitRatePoint `json:"points"`
}

// HitRatePoint is one hour of a HitRateSeries.
type HitRatePoint struct {
	Hour    time.Time `json:"hour" ch:"hour"`
	Hits    uint64    `json:"hits" ch:"hits"`
	Misses  uint64    `json:"misses" ch:"misses"`
	HitRate float64   `json:"hitRate" ch:"hit_rate"`
}

// ReasonCount is how many decisions one stage made for one reason.
type ReasonCount struct {
	Tenant    string `json:"-" ch:"tenant"`
	Stage     string `json:"stage" ch:"stage"`
	Reason    string `json:"reason" ch:"reason"`
	Decisions uint64 `json:"decisions" ch:"decisions"`
}

// AttemptCount is the provider calls of one channel with one result.
type AttemptCount struct {
	Tenant       string  `json:"-" ch:"tenant"`
	Channel      string  `json:"channel" ch:"channel"`
	Result       string  `json:"result" ch:"result"`
	Attempts     uint64  `json:"attempts" ch:"attempts"`
	Retries      uint64  `json:"retries" ch:"retries"`
	AvgLatencyMs float64 `json:"avgLatencyMs" ch:"avg_latency_ms"`
}

// OutcomeCount is the deliveries of one channel that ended in one status.
type OutcomeCount struct {
	Tenant      string  `json:"-" ch:"tenant"`
	Channel     string  `json:"channel" ch:"channel"`
	Status      string  `json:"status" ch:"status"`
	Deliveries  uint64  `json:"deliveries" ch:"deliveries"`
	AvgAttempts float64 `json:"avgAttempts" ch:"avg_attempts"`
}

// MaybeShownTwice is a delivery with two or more attempts that may have
// reached the device (see the query maybe_shown_twice).
type MaybeShownTwice struct {
	Tenant            string    `json:"-" ch:"tenant"`
	Channel           string    `json:"channel" ch:"channel"`
	DeliveryID        string    `json:"deliveryId" ch:"delivery_id"`
	NotificationID    string    `json:"notificationId" ch:"notification_id"`
	Recipient         string    `json:"recipient" ch:"recipient"`
	DeviceID          string    `json:"deviceId" ch:"device_id"`
	CollapseID        string    `json:"collapseId" ch:"collapse_id"`
	APNsID            string    `json:"apnsId" ch:"apns_id"`
	AmbiguousAttempts uint32    `json:"ambiguousAttempts" ch:"ambiguous_attempts"`
	PossibleCopies    uint32    `json:"possibleCopies" ch:"possible_copies"`
	FirstAt           time.Time `json:"firstAt" ch:"first_at"`
	LastAt            time.Time `json:"lastAt" ch:"last_at"`
}

// run runs the named query narrowed to tenant (at most limit rows; 0: no
// bound) and scans its rows into dest.
func (s *Source) run(ctx context.Context, name, tenant string, limit int, dest any, params map[string]string) error {
	if s == nil || s.Conn == nil {
		return ErrNotConfigured
	}
	q, err := queries.Get(name)
	if err != nil {
		return err
	}
	if q, err = q.ForTenant(limit); err != nil {
		return err
	}
	params[queries.TenantParam] = tenant
	if err := q.Select(ctx, s.Conn, dest, params); err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	return nil
}

// ErrNotConfigured is the error of a Source without a ClickHouse connection.
var ErrNotConfigured = errors.New("dashboard: no ClickHouse connection is configured")

// HitRate returns tenant's dedup hit rate per type, hour by hour, types in
// name order.
func (s *Source) HitRate(ctx context.Context, tenant string, w Window) ([]HitRateSeries, error) {
	var rows []struct {
		Tenant  string    `ch:"tenant"`
		Type    string    `ch:"type"`
		Hour    time.Time `ch:"hour"`
		Hits    uint64    `ch:"hits"`
		Misses  uint64    `ch:"misses"`
		HitRate float64   `ch:"hit_rate"`
	}
	if err := s.run(ctx, "hit_rate_hourly", tenant, 0, &rows, w.params()); err != nil {
		return nil, err
	}
	byType := map[string][]HitRatePoint{}
	for _, r := range rows {
		byType[r.Type] = append(byType[r.Type], HitRatePoint{Hour: r.Hour.UTC(), Hits: r.Hits, Misses: r.Misses, HitRate: r.HitRate})
	}
	out := []HitRateSeries{}
	for _, typ := range slices.Sorted(maps.Keys(byType)) {
		pts := byType[typ]
		slices.SortFunc(pts, func(a, b HitRatePoint) int { return a.Hour.Compare(b.Hour) })
		out = append(out, HitRateSeries{Type: typ, Points: pts})
	}
	return out, nil
}

// sortedRows runs the named query over w narrowed to tenant and returns
// its rows (never nil) sorted by order.
func sortedRows[T any](ctx context.Context, s *Source, name, tenant string, w Window, order func(a, b T) int) ([]T, error) {
	rows := []T{}
	if err := s.run(ctx, name, tenant, 0, &rows, w.params()); err != nil {
		return nil, err
	}
	slices.SortFunc(rows, order)
	return rows, nil
}

// Decisions returns tenant's decisions by stage and reason: stages in
// name order, the most frequent reason first.
func (s *Source) Decisions(ctx context.Context, tenant string, w Window) ([]ReasonCount, error) {
	return sortedRows(ctx, s, "decisions_by_reason", tenant, w, func(a, b ReasonCount) int {
		return cmp.Or(strings.Compare(a.Stage, b.Stage), cmp.Compare(b.Decisions, a.Decisions), strings.Compare(a.Reason, b.Reason))
	})
}

// Attempts returns tenant's provider calls by channel and result.
func (s *Source) Attempts(ctx context.Context, tenant string, w Window) ([]AttemptCount, error) {
	return sortedRows(ctx, s, "attempts_by_channel", tenant, w, func(a, b AttemptCount) int {
		return cmp.Or(strings.Compare(a.Channel, b.Channel), strings.Compare(a.Result, b.Result))
	})
}

// Outcomes returns tenant's final delivery states by channel and status.
func (s *Source) Outcomes(ctx context.Context, tenant string, w Window) ([]OutcomeCount, error) {
	return sortedRows(ctx, s, "outcomes_by_channel", tenant, w, func(a, b OutcomeCount) int {
		return cmp.Or(strings.Compare(a.Channel, b.Channel), strings.Compare(a.Status, b.Status))
	})
}

// ShownTwice returns up to limit of tenant's deliveries that may have been
// shown twice, the most recent first, and whether there were more.
func (s *Source) ShownTwice(ctx context.Context, tenant string, w Window, limit int) ([]MaybeShownTwice, bool, error) {
	var out []MaybeShownTwice
	// The query orders by tenant and time, the narrowed one not at all:
	// one row more than the limit tells whether rows were left out, and
	// the order is set here.
	if err := s.run(ctx, "maybe_shown_twice", tenant, limit+1, &out, w.params()); err != nil {
		return nil, false, err
	}
	for i := range out {
		out[i].FirstAt, out[i].LastAt = out[i].FirstAt.UTC(), out[i].LastAt.UTC()
	}
	slices.SortFunc(out, func(a, b MaybeShownTwice) int {
		return cmp.Or(b.LastAt.Compare(a.LastAt), strings.Compare(a.DeliveryID, b.DeliveryID))
	})
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// Timeline is one notification's audit timeline, as the page shows it.
type Timeline struct {
	NotificationID string `json:"notificationId"`
	// Status is the notification's status, as GET /v1/notifications/{id}
	// answers it (audit.NotificationStatus).
	Status  string          `json:"status"`
	Events  []TimelineEvent `json:"events"`
	Verdict Verdict         `json:"verdict"`
}

// TimelineEvent is one line of a Timeline.
type TimelineEvent struct {
	At        time.Time `json:"at"`
	Kind      string    `json:"kind"`
	Text      string    `json:"text"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
}

// Verdict answers "did anything reach a device twice?" (audit.Verdict).
type Verdict struct {
	Answer   string   `json:"answer"`
	Sentence string   `json:"sentence"`
	Reasons  []string `json:"reasons"`
}

// Timeline returns the audit timeline of tenant's notification id, and nil
// when the audit holds nothing of it for tenant (another tenant's
// notification included).
func (s *Source) Timeline(ctx context.Context, tenant, id string) (*Timeline, error) {
	if s == nil || s.Conn == nil {
		return nil, ErrNotConfigured
	}
	tl, err := audit.Load(ctx, s.Conn, s.Database, audit.Selector{NotificationID: id, Tenant: tenant})
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	evs := tl.Events()
	if len(evs) == 0 {
		return nil, nil
	}
	out := &Timeline{NotificationID: id, Status: tl.Status(id), Events: make([]TimelineEvent, len(evs)),
		Verdict: Verdict{Answer: tl.Verdict.Answer.String(), Sentence: tl.Verdict.Sentence(), Reasons: append([]string{}, tl.Verdict.Reasons...)}}
	for i, e := range evs {
		out.Events[i] = TimelineEvent{At: e.At.UTC(), Kind: e.Kind, Text: e.Text, Topic: e.Position.Topic, Partition: e.Position.Partition, Offset: e.Position.Offset}
	}
	return out, nil
}
