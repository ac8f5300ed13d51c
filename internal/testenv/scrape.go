package testenv

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Metrics is one scrape of a /metrics endpoint, by family name.
type Metrics map[string]*dto.MetricFamily

// Scrape GETs url (a /metrics endpoint) and parses it with the Prometheus
// text parser, as a Prometheus server would.
func Scrape(t testing.TB, url string) Metrics {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("testenv: scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("testenv: scrape %s: %s", url, resp.Status)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("testenv: parse %s: %v", url, err)
	}
	return fams
}

// series returns the series of name whose labels include the given
// key, value pairs.
func (m Metrics) series(name string, labels ...string) []*dto.Metric {
	f, ok := m[name]
	if !ok {
		return nil
	}
	var out []*dto.Metric
next:
	for _, s := range f.Metric {
		got := map[string]string{}
		for _, l := range s.Label {
			got[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if v, ok := got[labels[i]]; !ok || v != labels[i+1] {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

func value(s *dto.Metric) float64 {
	switch {
	case s.Counter != nil:
		return s.Counter.GetValue()
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Histogram != nil:
		return float64(s.Histogram.GetSampleCount())
	}
	return 0
}

// Value returns name{labels} (key, value pairs; the series must have
// exactly these labels) and whether it is there. A histogram's value is its
// count of observations.
func (m Metrics) Value(name string, labels ...string) (float64, bool) {
	for _, s := range m.series(name, labels...) {
		if len(s.Label) == len(labels)/2 {
			return value(s), true
		}
	}
	return 0, false
}

// Sum returns the sum of every series of name whose labels include the
// given key, value pairs (histograms: their counts).
func (m Metrics) Sum(name string, labels ...string) float64 {
	var sum float64
	for _, s := range m.series(name, labels...) {
		sum += value(s)
	}
	return sum
}

// Has reports whether some series of name has labels including the given
// key, value pairs.
func (m Metrics) Has(name string, labels ...string) bool {
	return len(m.series(name, labels...)) > 0
}
