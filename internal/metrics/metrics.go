// Package metrics owns herald's process metrics: counters and gauges kept in
// memory and served in the Prometheus text exposition format on /metrics.
// It is deliberately tiny: names are flat, labels are fixed at registration.
package metrics

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Counter only goes up.
type Counter struct{ v atomic.Int64 }

// Add adds n (n ≥ 0).
func (c *Counter) Add(n int64) { c.v.Add(n) }

// Inc adds one.
func (c *Counter) Inc() { c.v.Add(1) }

// Value returns the current count.
func (c *Counter) Value() int64 { return c.v.Load() }

// Gauge goes up and down.
type Gauge struct{ v atomic.Int64 }

// Set sets the gauge.
func (g *Gauge) Set(n int64) { g.v.Store(n) }

// Add adds n (may be negative).
func (g *Gauge) Add(n int64) { g.v.Add(n) }

// Value returns the current value.
func (g *Gauge) Value() int64 { return g.v.Load() }

type series struct {
	name, help, kind, labels string
	value                    func() int64
}

// Registry holds named series.
type Registry struct {
	mu     sync.Mutex
	series map[string]*series
	c      map[string]*Counter
	g      map[string]*Gauge
}

// Default is the process-wide registry.
var Default = NewRegistry()

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{series: map[string]*series{}, c: map[string]*Counter{}, g: map[string]*Gauge{}}
}

// Counter returns the counter name{labels}, creating it on first use.
// labels is a list of key, value pairs.
func (r *Registry) Counter(name, help string, labels ...string) *Counter {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := name + formatLabels(labels)
	if c, ok := r.c[id]; ok {
		return c
	}
	c := &Counter{}
	r.c[id] = c
	r.series[id] = &series{name: name, help: help, kind: "counter", labels: formatLabels(labels), value: c.Value}
	return c
}

// Gauge returns the gauge name{labels}, creating it on first use.
func (r *Registry) Gauge(name, help string, labels ...string) *Gauge {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := name + formatLabels(labels)
	if g, ok := r.g[id]; ok {
		return g
	}
	g := &Gauge{}
	r.g[id] = g
	r.series[id] = &series{name: name, help: help, kind: "gauge", labels: formatLabels(labels), value: g.Value}
	return g
}

func formatLabels(kv []string) string {
	if len(kv) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", kv[i], kv[i+1])
	}
	b.WriteByte('}')
	return b.String()
}

// WriteTo writes every series in the Prometheus text format, sorted by name.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	all := make([]*series, 0, len(r.series))
	for _, s := range r.series {
		all = append(all, s)
	}
	r.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if all[i].name != all[j].name {
			return all[i].name < all[j].name
		}
		return all[i].labels < all[j].labels
	})
	var n int64
	last := ""
	for _, s := range all {
		if s.name != last {
			k, err := fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", s.name, s.help, s.name, s.kind)
			n += int64(k)
			if err != nil {
				return n, err
			}
			last = s.name
		}
		k, err := fmt.Fprintf(w, "%s%s %d\n", s.name, s.labels, s.value())
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Handler serves the registry on /metrics.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		r.WriteTo(w)
	})
}
