package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// metricName matches the metric names of a PromQL query: herald's own, Go
// runtime and process metrics.
var metricName = regexp.MustCompile(`\b(?:herald|go|process)_[a-z0-9_]+\b`)

// dashboardMetrics reads deploy/grafana-herald.json, checks that it is a
// dashboard whose every panel queries something, and returns the metric
// families its queries name (a histogram's _bucket, _sum and _count series
// name their family).
func dashboardMetrics(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/grafana-herald.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("deploy/grafana-herald.json is not valid JSON: %v", err)
	}
	if d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("deploy/grafana-herald.json: title %q, %d panels", d.Title, len(d.Panels))
	}
	names := map[string]bool{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			found := metricName.FindAllString(q.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q: query %q names no herald, go_ or process_ metric", p.Title, q.Expr)
			}
			for _, n := range found {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if f, ok := strings.CutSuffix(n, suffix); ok && !strings.HasSuffix(n, "_total") {
						n = f
						break
					}
				}
				names[n] = true
			}
		}
	}
	return names
}

// TestGrafanaDashboardIsValid checks the dashboard's shape without the
// roles; TestEveryRoleExportsItsMetricsAndDrainsOnSIGTERM checks its
// metrics against what the roles export.
func TestGrafanaDashboardIsValid(t *testing.T) {
	if n := len(dashboardMetrics(t)); n < 10 {
		t.Fatalf("the dashboard names %d metrics", n)
	}
}
