package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/heraldhq/herald/analytics/dashboard"
	"github.com/heraldhq/herald/analytics/dashboard/dashboardtest"
	"github.com/heraldhq/herald/internal/testenv"
)

const (
	keyAcme   = "key-of-acme"
	keyGlobex = "key-of-globex"
)

// dashboardServer is an unstarted server (the dashboard needs no Kafka)
// with keys of tenants acme and globex, reading db when it is not nil.
func dashboardServer(t *testing.T, db *dashboardtest.DB) *Server {
	t.Helper()
	keys, err := ParseKeys(strings.NewReader(fmt.Sprintf("acme:svc:%s\nglobex:svc:%s\n", HashKey(keyAcme), HashKey(keyGlobex))))
	if err != nil {
		t.Fatal(err)
	}
	return unstarted(t, func(c *Config) {
		c.Keys = keys
		if db != nil {
			c.Dashboard = &dashboard.Source{Conn: db.Conn, Database: db.Name}
		}
	})
}

var dashboardEndpoints = []string{
	"/v1/dashboard/hit-rate", "/v1/dashboard/decisions", "/v1/dashboard/attempts", "/v1/dashboard/outcomes",
	"/v1/dashboard/shown-twice", "/v1/dashboard/notifications/0123456789abcdef0123456789abcdef/timeline",
}

func TestTheDashboardPageAndItsAssetsAreServedWithoutAKey(t *testing.T) {
	s := dashboardServer(t, nil)
	w := do(t, s, "GET", "/dashboard", "", "")
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /dashboard: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	page := w.Body.String()
	for _, c := range []struct{ name, ctype string }{
		{"dashboard.js", "text/javascript"},
		{"dashboard.css", "text/css"},
		{"chart.umd.min.js", "text/javascript"},
		{"chart.js-LICENSE.md", "text/plain"},
		{"chart.js-VERSION", "text/plain"},
	} {
		t.Run(c.name+" is served as "+c.ctype, func(t *testing.T) {
			w := do(t, s, "GET", "/dashboard/assets/"+c.name, "", "")
			if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), c.ctype) || w.Body.Len() == 0 {
				t.Fatalf("status %d, type %q, %d bytes", w.Code, w.Header().Get("Content-Type"), w.Body.Len())
			}
		})
	}
	t.Run("the page loads only herald's own assets, no CDN", func(t *testing.T) {
		for _, ref := range []string{`src="/dashboard/assets/chart.umd.min.js"`, `src="/dashboard/assets/dashboard.js"`, `href="/dashboard/assets/dashboard.css"`} {
			if !strings.Contains(page, ref) {
				t.Errorf("the page does not load %s", ref)
			}
		}
		if strings.Contains(page, "//cdn") || strings.Contains(page, "https://") {
			t.Error("the page references another origin")
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("Content-Security-Policy %q does not restrict scripts to herald", csp)
		}
	})
	t.Run("an unknown asset is a 404 problem", func(t *testing.T) {
		w := do(t, s, "GET", "/dashboard/assets/index.html", "", "")
		if w.Code != http.StatusNotFound {
			t.Fatalf("status %d, want 404", w.Code)
		}
		problemOf(t, w)
	})
}

func TestTheDashboardWithoutClickHouseAnswersAClearProblem(t *testing.T) {
	s := dashboardServer(t, nil)
	for _, path := range dashboardEndpoints {
		t.Run(path+" answers 503 dashboard-not-configured naming the flag", func(t *testing.T) {
			w := do(t, s, "GET", path, keyAcme, "")
			p := problemOf(t, w)
			if w.Code != http.StatusServiceUnavailable || p.Type != probDashboardNotConfigured || !strings.Contains(p.Detail, "--clickhouse-addr") {
				t.Fatalf("%d %+v", w.Code, p)
			}
		})
	}
}

func TestTheDashboardRefusesABadWindow(t *testing.T) {
	s := dashboardServer(t, nil)
	for _, c := range []struct{ name, query string }{
		{"a since that is not a time", "since=yesterday"},
		{"an empty until", "until="},
		{"an until that is not a time", "until=2026-13-01T00:00:00Z"},
		{"a since after until", "since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z"},
		{"a window over 400 days", "since=2020-01-01T00:00:00Z&until=2026-12-01T00:00:00Z"},
		{"a since before 1970", "since=1969-12-31T00:00:00Z"},
		{"an until after 2100", "since=2100-01-01T00:00:00Z&until=2100-01-02T00:00:00Z"},
		{"a limit of 0", "limit=0"},
		{"a limit over 1000", "limit=1001"},
	} {
		t.Run(c.name+" is a 422", func(t *testing.T) {
			w := do(t, s, "GET", "/v1/dashboard/shown-twice?"+c.query, keyAcme, "")
			if w.Code != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422: %s", w.Code, w.Body)
			}
			if p := problemOf(t, w); len(p.Errors) != 1 || !strings.HasPrefix(p.Errors[0].Field, "query:") {
				t.Fatalf("problem %+v, want one query field error", p)
			}
		})
	}
}

// getJSON answers a GET's status and decodes its JSON body into v.
func getJSON(t *testing.T, s http.Handler, path, key string, v any) int {
	t.Helper()
	w := do(t, s, "GET", path, key, "")
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, w.Body)
		}
	}
	return w.Code
}

func TestTheDashboardEndpointsAnswerTheKeysTenantFromClickHouse(t *testing.T) {
	db := dashboardtest.Populate(t)
	s := dashboardServer(t, db)
	window := "?" + url.Values{"since": {db.Rows.Base.Add(-24 * time.Hour).Format(time.RFC3339)}, "until": {db.Rows.Base.Format(time.RFC3339)}}.Encode()

	decisionsOf := func(tenant string) (n uint64) {
		for _, d := range db.Rows.Decisions {
			if d.Tenant == tenant {
				n++
			}
		}
		return n
	}
	for _, c := range []struct{ tenant, key string }{{"acme", keyAcme}, {"globex", keyGlobex}} {
		t.Run(c.tenant+"'s key counts exactly "+c.tenant+"'s decisions, attempts and outcomes", func(t *testing.T) {
			var dec struct {
				Since, Until time.Time
				Reasons      []dashboard.ReasonCount
			}
			if code := getJSON(t, s, "/v1/dashboard/decisions"+window, c.key, &dec); code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			var n uint64
			for _, r := range dec.Reasons {
				n += r.Decisions
			}
			if want := decisionsOf(c.tenant); n != want {
				t.Errorf("%d decisions, want %d", n, want)
			}
			if !dec.Since.Equal(db.Rows.Base.Add(-24*time.Hour)) || !dec.Until.Equal(db.Rows.Base) {
				t.Errorf("window %v..%v, want the whole hours asked for", dec.Since, dec.Until)
			}
			var att struct{ Attempts []dashboard.AttemptCount }
			getJSON(t, s, "/v1/dashboard/attempts"+window, c.key, &att)
			var out struct{ Outcomes []dashboard.OutcomeCount }
			getJSON(t, s, "/v1/dashboard/outcomes"+window, c.key, &out)
			var na, no, wa, wo uint64
			for _, r := range att.Attempts {
				na += r.Attempts
			}
			for _, r := range out.Outcomes {
				no += r.Deliveries
			}
			for _, a := range db.Rows.Attempts {
				if a.Tenant == c.tenant {
					wa++
				}
			}
			for _, o := range db.Rows.Outcomes {
				if o.Tenant == c.tenant {
					wo++
				}
			}
			if na != wa || no != wo {
				t.Errorf("%d attempts and %d outcomes, want %d and %d", na, no, wa, wo)
			}
		})
	}
	t.Run("the hit rate answers one series per type of the tenant", func(t *testing.T) {
		var hr struct{ Series []dashboard.HitRateSeries }
		if code := getJSON(t, s, "/v1/dashboard/hit-rate"+window, keyGlobex, &hr); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		var types []string
		for _, sr := range hr.Series {
			types = append(types, sr.Type)
		}
		if fmt.Sprint(types) != "[invoice.paid welcome]" {
			t.Fatalf("globex's series %v, want [invoice.paid welcome]", types)
		}
	})
	t.Run("shown twice lists the tenant's delivery only", func(t *testing.T) {
		var st DashboardShownTwice
		if code := getJSON(t, s, "/v1/dashboard/shown-twice"+window, keyAcme, &st); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		if len(st.Deliveries) != 1 || st.Deliveries[0].NotificationID != db.Rows.ShownTwice || st.Truncated {
			t.Fatalf("%+v, want acme's one delivery", st)
		}
	})
	t.Run("the timeline opens for the notification's tenant and is not found for another", func(t *testing.T) {
		var tl dashboard.Timeline
		path := "/v1/dashboard/notifications/" + db.Rows.ShownTwice + "/timeline"
		if code := getJSON(t, s, path, keyAcme, &tl); code != http.StatusOK || len(tl.Events) == 0 || tl.Verdict.Answer != "POSSIBLY" {
			t.Fatalf("acme: status %d, %+v", code, tl)
		}
		w := do(t, s, "GET", path, keyGlobex, "")
		if w.Code != http.StatusNotFound {
			t.Fatalf("globex: status %d, want 404", w.Code)
		}
		if p := problemOf(t, w); !strings.Contains(p.Detail, "herald holds nothing for this id") {
			t.Fatalf("globex: detail %q, want it to say herald holds nothing for this id", p.Detail)
		}
	})
	t.Run("without a window the last 7 days are read", func(t *testing.T) {
		var dec struct {
			Since, Until time.Time
			Reasons      []dashboard.ReasonCount
		}
		if code := getJSON(t, s, "/v1/dashboard/decisions", keyAcme, &dec); code != http.StatusOK || len(dec.Reasons) == 0 {
			t.Fatalf("status %d, %+v", code, dec)
		}
		if span := dec.Until.Sub(dec.Since); span < 7*24*time.Hour || span > 7*24*time.Hour+2*time.Hour {
			t.Fatalf("window %v..%v, want the 7 days to now in whole hours", dec.Since, dec.Until)
		}
	})
}

func TestTheDashboardAnswers503WithRetryAfterWhileClickHouseIsDown(t *testing.T) {
	// A port nothing listens on: every query fails to connect.
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := unstarted(t, func(c *Config) { c.Dashboard = &dashboard.Source{Conn: conn, Database: "herald"} })
	for _, path := range dashboardEndpoints {
		t.Run(path+" answers 503 unavailable with Retry-After", func(t *testing.T) {
			w := do(t, s, "GET", path, keyA, "")
			p := problemOf(t, w)
			if w.Code != http.StatusServiceUnavailable || p.Type != probUnavailable || w.Header().Get("Retry-After") == "" {
				t.Fatalf("%d %+v (Retry-After %q)", w.Code, p, w.Header().Get("Retry-After"))
			}
		})
	}
}

func TestThePageCarriesTheDevelopmentKeyOnlyWhereItIsGiven(t *testing.T) {
	for _, c := range []struct {
		name, key string
		want      bool
	}{
		{"herald dev's page fills in the development key", DevAPIKey, true},
		{"a deployment's page carries no key", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := unstarted(t, func(cfg *Config) { cfg.DashboardDevKey = c.key })
			page := do(t, s, "GET", "/dashboard", "", "").Body.String()
			if got := strings.Contains(page, `data-dev-key="`+DevAPIKey+`"`); got != c.want {
				t.Fatalf("the page carries the development key: %v, want %v", got, c.want)
			}
			if !strings.Contains(page, `id="api-key"`) {
				t.Fatal("the page lost its key field")
			}
		})
	}
}
