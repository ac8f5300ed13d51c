package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/analytics/dashboard"
	"github.com/heraldhq/herald/analytics/dashboard/dashboardtest"
	"github.com/heraldhq/herald/internal/testenv"
)

// renderedChart is what Chart.js drew on one canvas: its type, its
// labels, and per dataset its label, data and how many of its values (the
// non-null ones: an hour without data has nothing to draw) it drew as a
// visible bar.
type renderedChart struct {
	Type     string   `json:"type"`
	Labels   []string `json:"labels"`
	Datasets []struct {
		Label string     `json:"label"`
		Data  []*float64 `json:"data"`
		Drawn int        `json:"drawn"`
	} `json:"datasets"`
	Width  int `json:"width"`
	Height int `json:"height"`
}

// readCharts asks the page's Chart.js for every chart it drew. A value
// counts as drawn when its element is a bar at finite coordinates at least
// 2 px wide and 2 px tall: a line's point (no width, no height) or a bar
// of 0 px is not something a reader sees. Null values (hours without
// data) are not counted, whatever Chart.js placed for them.
const readCharts = `(() => {
	const out = {};
	const visible = (e) => !!e && !e.skip && [e.x, e.y, e.width, e.height].every(Number.isFinite) && e.width >= 2 && e.height >= 2;
	for (const canvas of document.querySelectorAll("canvas")) {
		const c = Chart.getChart(canvas);
		if (!c) continue;
		out[canvas.id] = {
			type: c.config.type,
			labels: c.data.labels.map(String),
			width: canvas.width, height: canvas.height,
			datasets: c.data.datasets.map((d, i) => {
				const els = c.getDatasetMeta(i).data;
				return {
					label: d.label,
					data: d.data,
					drawn: d.data.filter((v, j) => v !== null && v !== undefined && visible(els[j])).length,
				};
			}),
		};
	}
	return JSON.stringify(out);
})()`

// TestTheDashboardDrawsItsChartsAndOpensATimelineInChromium serves the
// dashboard over known audit rows in ClickHouse and opens it in headless
// Chromium with tenant acme's key: every chart is drawn by Chart.js with
// acme's numbers (read back from the charts, not from pixels), the table
// lists acme's delivery that may have been shown twice, the search box
// opens that notification's timeline with its verdict, and a screenshot of
// the populated page is kept (its path is logged).
func TestTheDashboardDrawsItsChartsAndOpensATimelineInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("headless Chromium and ClickHouse: not under -short")
	}
	db := dashboardtest.Populate(t)
	ctx, state, err := openDashboard(t, dashboardServer(t, db))
	if err != nil || state != "loaded" {
		problem, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("problem").textContent`))
		t.Fatalf("the page did not load (state %q, %v): %s", state, err, problem)
	}
	js, err := chromedp.Run(ctx, chromedp.Evaluate[string](readCharts))
	if err != nil {
		t.Fatal(err)
	}
	var charts map[string]renderedChart
	if err := json.Unmarshal([]byte(js), &charts); err != nil {
		t.Fatal(err)
	}
	rows := db.Rows

	t.Run("every chart is drawn on a canvas", func(t *testing.T) {
		for _, id := range []string{"chart-hit-rate", "chart-decisions", "chart-attempts", "chart-outcomes"} {
			c, ok := charts[id]
			if !ok || c.Width == 0 || c.Height == 0 {
				t.Errorf("%s: not drawn (%+v)", id, c)
				continue
			}
			for _, d := range c.Datasets {
				nonNull := 0
				for _, v := range d.Data {
					if v != nil {
						nonNull++
					}
				}
				if d.Drawn != nonNull || nonNull == 0 {
					t.Errorf("%s/%s: %d of its %d values drawn as a visible bar", id, d.Label, d.Drawn, nonNull)
				}
			}
		}
	})
	t.Run("a type with decisions in one hour only is drawn as one visible bar", func(t *testing.T) {
		c := charts["chart-hit-rate"]
		if c.Type != "bar" {
			t.Errorf("the hit rate chart is a %q chart, want bar", c.Type)
		}
		found := false
		for _, d := range c.Datasets {
			if d.Label != "order.shipped" {
				continue
			}
			found = true
			hours := 0
			for _, v := range d.Data {
				if v != nil {
					hours++
				}
			}
			if hours != 1 || d.Drawn != 1 {
				t.Errorf("order.shipped: %d hour(s) with data, %d drawn as a visible bar; want 1 and 1", hours, d.Drawn)
			}
		}
		if !found {
			t.Errorf("no order.shipped series in %+v", c.Datasets)
		}
	})
	t.Run("the hit rate chart has one series of bars per acme type with its hourly rates", func(t *testing.T) {
		c := charts["chart-hit-rate"]
		type hm struct{ hits, misses int }
		want := map[string]map[string]*hm{}
		for _, d := range rows.Decisions {
			if d.Tenant != "acme" || d.Stage != "dedupe" {
				continue
			}
			hour := d.At.UTC().Truncate(time.Hour).Format("01-02 15:04")
			if want[d.Type] == nil {
				want[d.Type] = map[string]*hm{}
			}
			if want[d.Type][hour] == nil {
				want[d.Type][hour] = &hm{}
			}
			switch d.Outcome {
			case "duplicate", "idempotent_replay":
				want[d.Type][hour].hits++
			case "accepted":
				want[d.Type][hour].misses++
			}
		}
		got := map[string]string{}
		for _, d := range c.Datasets {
			for i, v := range d.Data {
				if v != nil {
					got[d.Label+"@"+c.Labels[i]] = fmt.Sprintf("%.2f", *v)
				}
			}
		}
		wantS := map[string]string{}
		for typ, hours := range want {
			for h, x := range hours {
				if x.hits+x.misses > 0 {
					wantS[typ+"@"+h] = fmt.Sprintf("%.2f", 100*float64(x.hits)/float64(x.hits+x.misses))
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(wantS) {
			t.Fatalf("drawn %v, want %v", got, wantS)
		}
	})
	t.Run("the decisions chart has a bar per acme stage and reason", func(t *testing.T) {
		c := charts["chart-decisions"]
		want := map[string]int{}
		for _, d := range rows.Decisions {
			if d.Tenant == "acme" {
				want[d.Stage+" · "+d.Outcome]++
			}
		}
		got := map[string]int{}
		for i, l := range c.Labels {
			got[l] = int(*c.Datasets[0].Data[i])
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("drawn %v, want %v", got, want)
		}
	})
	stacked := func(t *testing.T, id string, want map[string]int) {
		t.Helper()
		c := charts[id]
		got := map[string]int{}
		for _, d := range c.Datasets {
			for i, v := range d.Data {
				if v != nil && *v != 0 {
					got[c.Labels[i]+"/"+d.Label] = int(*v)
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("drawn %v, want %v", got, want)
		}
	}
	t.Run("the attempts chart stacks acme's results per channel", func(t *testing.T) {
		want := map[string]int{}
		for _, a := range rows.Attempts {
			if a.Tenant == "acme" {
				want[a.Channel+"/"+a.Result]++
			}
		}
		stacked(t, "chart-attempts", want)
	})
	t.Run("the outcomes chart stacks acme's statuses per channel", func(t *testing.T) {
		want := map[string]int{}
		for _, o := range rows.Outcomes {
			if o.Tenant == "acme" {
				want[o.Channel+"/"+o.Status]++
			}
		}
		stacked(t, "chart-outcomes", want)
	})
	t.Run("the table lists acme's delivery that may have been shown twice", func(t *testing.T) {
		ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#shown-twice tbody tr")].map((tr) => tr.dataset.deliveryId)`))
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(ids)
		if fmt.Sprint(ids) != "[acme-apns-twice]" {
			t.Fatalf("rows %v, want [acme-apns-twice]", ids)
		}
	})

	// A screenshot of the populated page, before the timeline opens.
	t.Logf("screenshot of the populated dashboard: %s", screenshot(t, ctx, "dashboard.png"))

	t.Run("the search box opens the notification's timeline with its verdict", func(t *testing.T) {
		state, err := search(ctx, rows.ShownTwice)
		if err != nil || state != "loaded" {
			t.Fatalf("timeline state %q, %v", state, err)
		}
		kinds, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#timeline-events li")].map((li) => li.dataset.kind)`))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, d := range rows.Decisions {
			if d.NotificationID == rows.ShownTwice {
				want = append(want, "decision")
			}
		}
		for _, a := range rows.Attempts {
			if a.NotificationID == rows.ShownTwice {
				want = append(want, "attempt")
			}
		}
		for _, o := range rows.Outcomes {
			if o.NotificationID == rows.ShownTwice {
				want = append(want, "outcome")
			}
		}
		if strings.Join(kinds, " ") != strings.Join(want, " ") {
			t.Fatalf("timeline events %v, want %v", kinds, want)
		}
		verdict, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("verdict").className + ": " + document.getElementById("verdict").textContent`))
		if err != nil || !strings.HasPrefix(verdict, "POSSIBLY: ") {
			t.Fatalf("verdict %q, %v; want POSSIBLY", verdict, err)
		}
		t.Logf("screenshot of the opened timeline: %s", screenshot(t, ctx, "dashboard-timeline.png"))
	})
	t.Run("another tenant's notification is not found from the search box", func(t *testing.T) {
		state, err := search(ctx, "globex-n-twice")
		if err != nil || state != "not-found" {
			t.Fatalf("timeline state %q, %v; want not-found", state, err)
		}
		verdict, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("verdict").textContent`))
		if err != nil || !strings.HasPrefix(verdict, "herald holds nothing for this id") {
			t.Fatalf("verdict %q, %v; want it to say herald holds nothing for this id", verdict, err)
		}
	})
	t.Run("the timeline's status moves from accepted to routed to delivered as the audit records each step", func(t *testing.T) {
		const id, req, delivery = "acme-n-moving", "req-moving", "acme-moving-d0"
		at := rows.Base.Add(-30 * time.Minute)
		steps := []struct {
			record string
			args   []any
			want   string
		}{
			{"INSERT INTO `" + db.Name + "`.decisions (kafka_topic, kafka_partition, kafka_offset, at, decision_id, stage, outcome, request_id, tenant, type, recipient, notification_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
				[]any{"herald.decisions", int32(1), int64(1), at, "dec-moving-1", "dedupe", "accepted", req, "acme", "invoice.paid", "u_1", id}, "accepted"},
			{"INSERT INTO `" + db.Name + "`.decisions (kafka_topic, kafka_partition, kafka_offset, at, decision_id, stage, outcome, request_id, tenant, type, recipient, notification_id, delivery_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
				[]any{"herald.decisions", int32(1), int64(2), at.Add(time.Second), "dec-moving-2", "route", "accepted", req, "acme", "invoice.paid", "u_1", id, []string{delivery}}, "routed"},
			{"INSERT INTO `" + db.Name + "`.outcomes (kafka_topic, kafka_partition, kafka_offset, at, delivery_id, notification_id, tenant, type, recipient, device_id, channel, status, attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
				[]any{"herald.outcomes", int32(1), int64(3), at.Add(2 * time.Second), delivery, id, "acme", "invoice.paid", "u_1", "dev-" + delivery, "apns", "delivered", uint16(1)}, "delivered"},
		}
		var seen []string
		for _, st := range steps {
			if err := db.Conn.Exec(context.Background(), st.record, st.args...); err != nil {
				t.Fatal(err)
			}
			state, err := search(ctx, id)
			if err != nil || state != "loaded" {
				t.Fatalf("after the %s step: timeline state %q, %v", st.want, state, err)
			}
			shown, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[document.getElementById("timeline").dataset.status, document.getElementById("verdict").textContent]`))
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, shown[0])
			if shown[0] != st.want || !strings.HasPrefix(shown[1], "Status: "+st.want+". ") {
				t.Fatalf("statuses shown %v; the timeline shows %q (%q), want %q", seen, shown[0], shown[1], st.want)
			}
		}
	})
	t.Run("the page opens on the last 24 hours", func(t *testing.T) {
		hours, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("window").value`))
		if err != nil || hours != "24" {
			t.Fatalf("window %q, %v; want 24 (hours)", hours, err)
		}
	})
}

// TestTheDashboardPageShowsTheProblemWhenClickHouseIsNotConfigured opens
// the page on a server without ClickHouse: it says so instead of drawing.
func TestTheDashboardPageShowsTheProblemWhenClickHouseIsNotConfigured(t *testing.T) {
	if testing.Short() {
		t.Skip("headless Chromium: not under -short")
	}
	ctx, state, err := openDashboard(t, dashboardServer(t, nil))
	if err != nil || state != "problem" {
		t.Fatalf("state %q, %v; want problem", state, err)
	}
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("problem").textContent`))
	if err != nil || !strings.Contains(text, "Dashboard not configured") || !strings.Contains(text, "--clickhouse-addr") {
		t.Fatalf("problem shown %q, %v", text, err)
	}
}

// TestTheDashboardOnHeraldDevLoadsWithTheDevelopmentKeyInChromium serves
// the page as herald dev does (its key set, the development key filled in)
// and opens it in headless Chromium without typing anything: the key field
// holds the development key, and the page's first data request carries it
// and is answered 200, so the page loads.
func TestTheDashboardOnHeraldDevLoadsWithTheDevelopmentKeyInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("headless Chromium and ClickHouse: not under -short")
	}
	db := dashboardtest.Populate(t)
	s := unstarted(t, func(c *Config) {
		c.Keys = DevKeys()
		c.DashboardDevKey = DevAPIKey
		c.Dashboard = &dashboard.Source{Conn: db.Conn, Database: db.Name}
	})
	type request struct {
		path, auth string
		status     int
	}
	var mu sync.Mutex
	var requests []request
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/dashboard/") {
			s.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		s.ServeHTTP(rec, r)
		mu.Lock()
		requests = append(requests, request{r.URL.Path, r.Header.Get("Authorization"), rec.status})
		mu.Unlock()
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	b := testenv.Chromium(t, srv.URL)
	ctx, cancel := context.WithTimeout(b.Ctx, 3*time.Minute)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/dashboard")); err != nil {
		t.Fatal(err)
	}
	state, err := chromedp.Run(ctx, chromedp.Poll[string](`["loaded", "problem", "needs-key"].includes(document.body.dataset.state) && document.body.dataset.state`,
		chromedp.WithPollingTimeout(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	key, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("api-key").value`))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if key != DevAPIKey {
		t.Errorf("the key field holds %q, want the development key %q", key, DevAPIKey)
	}
	if len(requests) == 0 {
		t.Fatalf("the page made no data request (state %q)", state)
	}
	if first := requests[0]; first.auth != "Bearer "+DevAPIKey || first.status != http.StatusOK {
		t.Errorf("the first data request, %s, carried %q and was answered %d; want the development key and 200", first.path, first.auth, first.status)
	}
	if state != "loaded" {
		problem, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("problem").textContent`))
		t.Errorf("the page's state is %q (%s), want loaded", state, problem)
	}
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// openDashboard opens srv's dashboard in headless Chromium, gives it tenant
// acme's key, and waits until the page has loaded or shows a problem; it
// returns the page's state.
func openDashboard(t *testing.T, h http.Handler) (context.Context, string, error) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	b := testenv.Chromium(t, srv.URL)
	ctx, cancel := context.WithTimeout(b.Ctx, 3*time.Minute)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/dashboard"),
		chromedp.WaitVisible(chromedp.CSS("#api-key")),
		chromedp.SendKeys(chromedp.CSS("#api-key"), keyAcme),
		chromedp.Click(chromedp.CSS("#key-form button")),
	); err != nil {
		t.Fatal(err)
	}
	state, err := chromedp.Run(ctx, chromedp.Poll[string](`["loaded", "problem"].includes(document.body.dataset.state) && document.body.dataset.state`,
		chromedp.WithPollingTimeout(time.Minute)))
	return ctx, state, err
}

// search types id into the search box, opens its timeline and returns the
// timeline's state once it has loaded or failed.
func search(ctx context.Context, id string) (string, error) {
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#search"), id),
		chromedp.Click(chromedp.CSS("#search-form button")),
	); err != nil {
		return "", err
	}
	return chromedp.Run(ctx, chromedp.Poll[string](`(() => { const s = document.getElementById("timeline").dataset.state; return s && s !== "loading" && s; })()`,
		chromedp.WithPollingTimeout(time.Minute)))
}

// screenshot keeps a full screenshot of the page as a test artifact
// (testenv.Artifact: test-artifacts/ at the module's root) and returns its
// path.
func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Artifact(t, name, png)
}
