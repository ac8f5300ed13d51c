package ops_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/ops"
	"github.com/heraldhq/herald/internal/testenv"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpointAnswersLivenessReadinessAndMetrics(t *testing.T) {
	var restored, connected atomic.Bool
	reg := metrics.NewRegistry()
	reg.Counter("herald_test_total", "a test counter").Add(7)
	s, err := ops.Serve("127.0.0.1:0", ops.Handler(reg,
		ops.Check{Name: "stage restored", Ready: restored.Load},
		ops.Check{Name: "writer connected", Ready: connected.Load}), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + s.Addr()

	tests := []struct {
		name               string
		restored, connectd bool
		wantCode           int
		wantBody           []string
	}{
		{"readyz is 503 naming every check that fails", false, false, 503, []string{"stage restored", "writer connected"}},
		{"readyz is 503 naming only the failing check", true, false, 503, []string{"writer connected"}},
		{"readyz is 200 once every check passes", true, true, 200, []string{"ok"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			restored.Store(tc.restored)
			connected.Store(tc.connectd)
			code, body := get(t, base+"/readyz")
			if code != tc.wantCode {
				t.Fatalf("/readyz %d %q, want %d", code, body, tc.wantCode)
			}
			for _, w := range tc.wantBody {
				if !strings.Contains(body, w) {
					t.Errorf("/readyz body %q lacks %q", body, w)
				}
			}
			if tc.restored && strings.Contains(body, "stage restored") {
				t.Errorf("/readyz body %q names a passing check", body)
			}
		})
	}
	t.Run("livez is 200 whatever the readiness", func(t *testing.T) {
		restored.Store(false)
		if code, body := get(t, base+"/livez"); code != 200 {
			t.Fatalf("/livez %d %q", code, body)
		}
	})
	t.Run("pprof serves the process's profiles", func(t *testing.T) {
		code, body := get(t, base+"/debug/pprof/heap")
		if code != 200 || !strings.HasPrefix(body, "\x1f\x8b") { // a gzipped profile.proto
			t.Fatalf("/debug/pprof/heap %d (%d bytes), want 200 and a gzipped profile", code, len(body))
		}
		code, body = get(t, base+"/debug/pprof/profile?seconds=1")
		if code != 200 || !strings.HasPrefix(body, "\x1f\x8b") {
			t.Fatalf("/debug/pprof/profile %d (%d bytes), want 200 and a gzipped CPU profile", code, len(body))
		}
		if code, body := get(t, base+"/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile:") {
			t.Fatalf("/debug/pprof/goroutine %d %.80q, want the goroutine dump", code, body)
		}
	})
	t.Run("metrics serves the registry", func(t *testing.T) {
		if v, ok := testenv.Scrape(t, base+"/metrics").Value("herald_test_total"); !ok || v != 7 {
			t.Fatalf("herald_test_total = %v, %v; want 7", v, ok)
		}
	})
}

func TestAWrongMethodIsA405ProblemAllowingGETAndHEAD(t *testing.T) {
	h := ops.Handler(metrics.NewRegistry(), ops.Check{Name: "always", Ready: func() bool { return true }})
	for _, path := range ops.Paths {
		for _, method := range []string{"POST", "PUT", "DELETE"} {
			t.Run(method+" "+path+" is a 405 problem allowing GET and HEAD", func(t *testing.T) {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
				if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
					t.Fatalf("%d, Allow %q: %s; want 405 with Allow: GET, HEAD", w.Code, w.Header().Get("Allow"), w.Body)
				}
				var p struct {
					Type   string `json:"type"`
					Status int    `json:"status"`
				}
				if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(w.Body.Bytes(), &p) != nil ||
					p.Status != http.StatusMethodNotAllowed || p.Type != "https://herald.dev/problems/method-not-allowed" {
					t.Fatalf("%s body %s, want a method-not-allowed problem", ct, w.Body)
				}
			})
		}
		t.Run("HEAD "+path+" answers 200", func(t *testing.T) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("HEAD", path, nil))
			if w.Code != http.StatusOK {
				t.Fatalf("%d: %s", w.Code, w.Body)
			}
		})
	}
}

func TestReadyzListsWarningsWithoutFailingReadiness(t *testing.T) {
	var ready atomic.Bool
	var warnings atomic.Pointer[[]string]
	none := []string{}
	warnings.Store(&none)
	s, err := ops.Serve("127.0.0.1:0", ops.Handler(metrics.NewRegistry(),
		ops.Check{Name: "dedupe stage", Ready: ready.Load, Warnings: func() []string { return *warnings.Load() }},
		ops.Check{Name: "no warnings", Ready: func() bool { return true }}), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hanging := []string{"herald.seen/3: last stable offset stuck at 5 below 9"}
	for _, tc := range []struct {
		name     string
		ready    bool
		warnings []string
		code     int
		body     string
	}{
		{"a ready role without warnings answers ok alone", true, none, 200, "ok\n"},
		{"a ready role with a warning stays ready and lists it", true, hanging, 200, "ok\nwarning: dedupe stage: herald.seen/3: last stable offset stuck at 5 below 9\n"},
		{"an unready role lists its warnings after what is not ready", false, hanging, 503, "not ready: dedupe stage\nwarning: dedupe stage: herald.seen/3: last stable offset stuck at 5 below 9\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready.Store(tc.ready)
			warnings.Store(&tc.warnings)
			if code, body := get(t, "http://"+s.Addr()+"/readyz"); code != tc.code || body != tc.body {
				t.Fatalf("/readyz %d %q, want %d %q", code, body, tc.code, tc.body)
			}
		})
	}
}
