package dashboard_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/analytics/dashboard"
	"github.com/heraldhq/herald/analytics/dashboard/dashboardtest"
)

// The expectations below are computed from the rows written, in Go,
// independently of the dashboard's SQL.

func hitRates(rows dashboardtest.Rows, tenant string) map[string]string {
	type hm struct{ hits, misses uint64 }
	c := map[string]*hm{}
	for _, d := range rows.Decisions {
		if d.Tenant != tenant || d.Stage != "dedupe" {
			continue
		}
		k := d.Type + "@" + d.At.Truncate(time.Hour).Format(time.RFC3339)
		if c[k] == nil {
			c[k] = &hm{}
		}
		switch d.Outcome {
		case "duplicate", "idempotent_replay":
			c[k].hits++
		case "accepted":
			c[k].misses++
		}
	}
	out := map[string]string{}
	for k, v := range c {
		if v.hits+v.misses > 0 {
			out[k] = fmt.Sprintf("%d/%d", v.hits, v.misses)
		}
	}
	return out
}

func reasons(rows dashboardtest.Rows, tenant string) map[string]uint64 {
	out := map[string]uint64{}
	for _, d := range rows.Decisions {
		if d.Tenant == tenant {
			out[d.Stage+"/"+d.Outcome]++
		}
	}
	return out
}

func attempts(rows dashboardtest.Rows, tenant string) map[string]string {
	type c struct {
		n, retries uint64
		latency    int64
	}
	m := map[string]*c{}
	for _, a := range rows.Attempts {
		if a.Tenant != tenant {
			continue
		}
		k := a.Channel + "/" + a.Result
		if m[k] == nil {
			m[k] = &c{}
		}
		m[k].n++
		if a.N > 1 {
			m[k].retries++
		}
		m[k].latency += a.LatencyMs
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprintf("%d attempts, %d retries, %.3f ms", v.n, v.retries, float64(v.latency)/float64(v.n))
	}
	return out
}

func outcomes(rows dashboardtest.Rows, tenant string) map[string]string {
	type c struct{ n, attempts uint64 }
	m := map[string]*c{}
	for _, o := range rows.Outcomes {
		if o.Tenant != tenant {
			continue
		}
		k := o.Channel + "/" + o.Status
		if m[k] == nil {
			m[k] = &c{}
		}
		m[k].n++
		m[k].attempts += uint64(o.Attempts)
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprintf("%d deliveries, %.3f attempts", v.n, float64(v.attempts)/float64(v.n))
	}
	return out
}

// shownTwice lists the deliveries with two or more attempts sent or
// ambiguous.
func shownTwice(rows dashboardtest.Rows, tenant string) []string {
	n := map[string]int{}
	for _, a := range rows.Attempts {
		if a.Tenant == tenant && (a.Result == "sent" || a.Result == "ambiguous") {
			n[a.DeliveryID]++
		}
	}
	var out []string
	for id, k := range n {
		if k >= 2 {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func TestTheDashboardAnswersEachTenantFromItsOwnRows(t *testing.T) {
	db := dashboardtest.Populate(t)
	src := &dashboard.Source{Conn: db.Conn, Database: db.Name}
	ctx := context.Background()
	w := dashboard.Hours(db.Rows.Base.Add(-24*time.Hour), db.Rows.Base)
	for _, tenant := range []string{"acme", "globex", "nobody"} {
		t.Run("tenant "+tenant+" gets the hit rate of its own types hour by hour", func(t *testing.T) {
			series, err := src.HitRate(ctx, tenant, w)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for i, s := range series {
				if i > 0 && series[i-1].Type >= s.Type {
					t.Errorf("series not in type order: %q then %q", series[i-1].Type, s.Type)
				}
				for j, p := range s.Points {
					if j > 0 && !s.Points[j-1].Hour.Before(p.Hour) {
						t.Errorf("%s: points not in time order", s.Type)
					}
					if want := float64(p.Hits) / float64(p.Hits+p.Misses); math.Abs(p.HitRate-want) > 1e-12 {
						t.Errorf("%s %s: hit rate %v, want %v", s.Type, p.Hour, p.HitRate, want)
					}
					got[s.Type+"@"+p.Hour.Format(time.RFC3339)] = fmt.Sprintf("%d/%d", p.Hits, p.Misses)
				}
			}
			if want := hitRates(db.Rows, tenant); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("hit rates %v, want %v", got, want)
			}
		})
		t.Run("tenant "+tenant+" gets its decisions by stage and reason", func(t *testing.T) {
			rows, err := src.Decisions(ctx, tenant, w)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]uint64{}
			for _, r := range rows {
				got[r.Stage+"/"+r.Reason] = r.Decisions
			}
			if want := reasons(db.Rows, tenant); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("decisions %v, want %v", got, want)
			}
		})
		t.Run("tenant "+tenant+" gets its attempts by channel and result", func(t *testing.T) {
			rows, err := src.Attempts(ctx, tenant, w)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, r := range rows {
				got[r.Channel+"/"+r.Result] = fmt.Sprintf("%d attempts, %d retries, %.3f ms", r.Attempts, r.Retries, r.AvgLatencyMs)
			}
			if want := attempts(db.Rows, tenant); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("attempts %v, want %v", got, want)
			}
		})
		t.Run("tenant "+tenant+" gets its outcomes by channel and status", func(t *testing.T) {
			rows, err := src.Outcomes(ctx, tenant, w)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, r := range rows {
				got[r.Channel+"/"+r.Status] = fmt.Sprintf("%d deliveries, %.3f attempts", r.Deliveries, r.AvgAttempts)
			}
			if want := outcomes(db.Rows, tenant); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("outcomes %v, want %v", got, want)
			}
		})
		t.Run("tenant "+tenant+" gets only its own deliveries that may have been shown twice", func(t *testing.T) {
			rows, more, err := src.ShownTwice(ctx, tenant, w, 100)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rows {
				got = append(got, r.DeliveryID)
				if r.PossibleCopies < 2 || r.AmbiguousAttempts < 1 {
					t.Errorf("%s: %d possible copies, %d ambiguous attempts", r.DeliveryID, r.PossibleCopies, r.AmbiguousAttempts)
				}
			}
			sort.Strings(got)
			if want := shownTwice(db.Rows, tenant); fmt.Sprint(got) != fmt.Sprint(want) || more {
				t.Fatalf("shown twice %v (more: %v), want %v", got, more, want)
			}
		})
	}
	t.Run("a window that holds none of the rows answers nothing", func(t *testing.T) {
		old := dashboard.Hours(db.Rows.Base.Add(-72*time.Hour), db.Rows.Base.Add(-48*time.Hour))
		series, err := src.HitRate(ctx, "acme", old)
		if err != nil || len(series) != 0 {
			t.Fatalf("hit rate %v, %v; want none", series, err)
		}
		rows, err := src.Decisions(ctx, "acme", old)
		if err != nil || len(rows) != 0 {
			t.Fatalf("decisions %v, %v; want none", rows, err)
		}
	})
	t.Run("the list of deliveries shown twice is cut at the limit and says so", func(t *testing.T) {
		// Both tenants' rows would be two: the limit counts one tenant's.
		rows, more, err := src.ShownTwice(ctx, "acme", w, 1)
		if err != nil || len(rows) != 1 || more {
			t.Fatalf("limit 1: %d rows, more %v, %v; want the one row, no more", len(rows), more, err)
		}
		rows, more, err = src.ShownTwice(ctx, "acme", w, 0)
		if err != nil || len(rows) != 0 || !more {
			t.Fatalf("limit 0: %d rows, more %v, %v; want none and more", len(rows), more, err)
		}
	})
	t.Run("a notification's timeline shows its events and the verdict, to its tenant only", func(t *testing.T) {
		tl, err := src.Timeline(ctx, "acme", db.Rows.ShownTwice)
		if err != nil {
			t.Fatal(err)
		}
		if tl == nil {
			t.Fatal("no timeline")
		}
		var kinds []string
		for _, e := range tl.Events {
			kinds = append(kinds, e.Kind)
		}
		if want := "decision decision attempt attempt outcome"; strings.Join(kinds, " ") != want {
			t.Errorf("events %q, want %q", strings.Join(kinds, " "), want)
		}
		if tl.Verdict.Answer != "POSSIBLY" || len(tl.Verdict.Reasons) != 1 || !strings.Contains(tl.Verdict.Reasons[0], "acme-apns-twice") {
			t.Errorf("verdict %+v, want POSSIBLY naming delivery acme-apns-twice", tl.Verdict)
		}
		other, err := src.Timeline(ctx, "globex", db.Rows.ShownTwice)
		if err != nil || other != nil {
			t.Fatalf("globex asking for acme's notification got %+v, %v; want nothing", other, err)
		}
	})
	t.Run("a source without ClickHouse says it is not configured", func(t *testing.T) {
		var none *dashboard.Source
		if _, err := none.HitRate(ctx, "acme", w); err != dashboard.ErrNotConfigured {
			t.Fatalf("err %v, want ErrNotConfigured", err)
		}
		if _, err := (&dashboard.Source{}).Timeline(ctx, "acme", "x"); err != dashboard.ErrNotConfigured {
			t.Fatalf("err %v, want ErrNotConfigured", err)
		}
	})
}

// TestTheVendoredChartJSIsThePackagesFile checks the embedded Chart.js
// against its VERSION note (written by scripts/dashboard/vendor-chartjs
// from the npm package) and that its license ships beside it.
func TestTheVendoredChartJSIsThePackagesFile(t *testing.T) {
	note, err := os.ReadFile("static/vendor/chartjs/VERSION")
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(note)), "\n") {
		k, v, _ := strings.Cut(line, " ")
		fields[k] = v
	}
	_, js, ok := dashboard.AssetNamed("chart.umd.min.js")
	if !ok {
		t.Fatal("chart.umd.min.js is not served")
	}
	sum := sha256.Sum256(js)
	if got := hex.EncodeToString(sum[:]); got != fields["sha256"] || fields["version"] == "" || fields["package"] != "chart.js" {
		t.Fatalf("VERSION %v, served file's sha256 %s", fields, got)
	}
	_, lic, ok := dashboard.AssetNamed("chart.js-LICENSE.md")
	if !ok || !strings.Contains(string(lic), "MIT") {
		t.Fatalf("the license is not served, or is not Chart.js's MIT license: %.80q", lic)
	}
	if _, _, ok := dashboard.AssetNamed("../index.html"); ok {
		t.Fatal("a name outside the asset list is served")
	}
}
