// Package metrics owns herald's process metrics: a small API (counters,
// gauges, histograms, named with fixed label sets) over a Prometheus
// registry from github.com/prometheus/client_golang, with the Go runtime and
// process collectors, served by promhttp on /metrics.
//
// A metric's name fixes its kind, its help and its label names at its first
// use; asking for the same name later with another kind or other label names
// is a programming error and panics. Label values must come from small sets
// (stage, channel, outcome, partition): never notification, recipient or
// device ids. Values from open sets (tenants, notification types) go through
// a Limit, which keeps the first N distinct values and folds the rest into
// "other".
package metrics

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Counter only goes up.
type Counter struct{ c prometheus.Counter }

// Add adds n (n ≥ 0).
func (c *Counter) Add(n int64) { c.c.Add(float64(n)) }

// Inc adds one.
func (c *Counter) Inc() { c.c.Inc() }

// Value returns the current count.
func (c *Counter) Value() int64 {
	var m dto.Metric
	_ = c.c.Write(&m) // a counter's Write never fails
	return int64(m.GetCounter().GetValue())
}

// Gauge goes up and down.
type Gauge struct{ g prometheus.Gauge }

// Set sets the gauge.
func (g *Gauge) Set(n int64) { g.g.Set(float64(n)) }

// SetFloat sets the gauge to a fractional value (seconds).
func (g *Gauge) SetFloat(v float64) { g.g.Set(v) }

// Add adds n (may be negative).
func (g *Gauge) Add(n int64) { g.g.Add(float64(n)) }

// Value returns the current value, truncated to an integer.
func (g *Gauge) Value() int64 {
	var m dto.Metric
	_ = g.g.Write(&m)
	return int64(m.GetGauge().GetValue())
}

// Histogram counts observations in buckets.
type Histogram struct{ h prometheus.Observer }

// Observe adds one observation.
func (h *Histogram) Observe(v float64) { h.h.Observe(v) }

// ObserveSince observes the seconds elapsed since start.
func (h *Histogram) ObserveSince(start time.Time) { h.h.Observe(time.Since(start).Seconds()) }

// LatencyBuckets are the default buckets of latencies in seconds, 1 ms to
// about 30 s.
var LatencyBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 12)

// SizeBuckets are the default buckets of batch sizes (rows, records), 1 to
// about 1M.
var SizeBuckets = prometheus.ExponentialBuckets(1, 4, 11)

type family struct {
	kind    string
	labels  []string
	counter *prometheus.CounterVec
	gauge   *prometheus.GaugeVec
	hist    *prometheus.HistogramVec
}

// Registry holds named metric families.
type Registry struct {
	reg *prometheus.Registry
	mu  sync.Mutex
	fam map[string]*family
}

// Default is the process-wide registry every role serves.
var Default = NewRegistry()

// NewRegistry returns a registry holding only the Go runtime and process
// collectors.
func NewRegistry() *Registry {
	r := &Registry{reg: prometheus.NewRegistry(), fam: map[string]*family{}}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

func split(kv []string) (names, values []string) {
	if len(kv)%2 != 0 {
		panic(fmt.Sprintf("metrics: odd label list %q", kv))
	}
	for i := 0; i < len(kv); i += 2 {
		names, values = append(names, kv[i]), append(values, kv[i+1])
	}
	return names, values
}

// family returns name's family, creating it with mk on first use.
func (r *Registry) family(name, kind string, labels []string, mk func() (prometheus.Collector, *family)) *family {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.fam[name]; ok {
		if f.kind != kind || !slices.Equal(f.labels, labels) {
			panic(fmt.Sprintf("metrics: %s is a %s with labels %q, asked for as a %s with labels %q", name, f.kind, f.labels, kind, labels))
		}
		return f
	}
	c, f := mk()
	f.kind, f.labels = kind, labels
	r.reg.MustRegister(c)
	r.fam[name] = f
	return f
}

// Counter returns the counter name{labels}, creating it on first use.
// labels is a list of key, value pairs.
func (r *Registry) Counter(name, help string, labels ...string) *Counter {
	names, values := split(labels)
	f := r.family(name, "counter", names, func() (prometheus.Collector, *family) {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, names)
		return v, &family{counter: v}
	})
	return &Counter{f.counter.WithLabelValues(values...)}
}

// Gauge returns the gauge name{labels}, creating it on first use.
func (r *Registry) Gauge(name, help string, labels ...string) *Gauge {
	names, values := split(labels)
	f := r.family(name, "gauge", names, func() (prometheus.Collector, *family) {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, names)
		return v, &family{gauge: v}
	})
	return &Gauge{f.gauge.WithLabelValues(values...)}
}

// Histogram returns the histogram name{labels}, creating it on first use
// with buckets (fixed by the first use).
func (r *Registry) Histogram(name, help string, buckets []float64, labels ...string) *Histogram {
	names, values := split(labels)
	f := r.family(name, "histogram", names, func() (prometheus.Collector, *family) {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, names)
		return v, &family{hist: v}
	})
	return &Histogram{f.hist.WithLabelValues(values...)}
}

// Forget removes the series name{labels} (a partition no longer owned), so
// it is not exported with a stale value.
func (r *Registry) Forget(name string, labels ...string) {
	_, values := split(labels)
	r.mu.Lock()
	f, ok := r.fam[name]
	r.mu.Unlock()
	if !ok {
		return
	}
	switch {
	case f.counter != nil:
		f.counter.DeleteLabelValues(values...)
	case f.gauge != nil:
		f.gauge.DeleteLabelValues(values...)
	case f.hist != nil:
		f.hist.DeleteLabelValues(values...)
	}
}

// Names returns the names of the families registered so far by herald's
// code (not the runtime collectors'), sorted.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.fam))
	for n := range r.fam {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Gatherer is the underlying Prometheus gatherer.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg})
}

// Other is the label value a Limit gives values beyond its first N.
const Other = "other"

// Limit bounds the distinct values of one label: the first N values it is
// given pass unchanged, every later one becomes Other. What passes depends
// on arrival order, per process; a restart may admit other values.
type Limit struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

// NewLimit returns a Limit of n distinct values.
func NewLimit(n int) *Limit { return &Limit{max: n, seen: map[string]struct{}{}} }

// Value returns v if it is among the admitted values (admitting it while
// fewer than N are), else Other.
func (l *Limit) Value(v string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[v]; ok {
		return v
	}
	if len(l.seen) >= l.max {
		return Other
	}
	l.seen[v] = struct{}{}
	return v
}

// Lag exports, per fetched partition, how many records the consumer is
// behind the partition's last stable offset (its high watermark under
// read_uncommitted), as gauge Name{labels..., topic, partition}.
//
// It is measured from the fetches themselves, after the last record a
// fetch returned: a partition that returns no records keeps its last value,
// and a transaction's commit marker after the last record counts as one,
// so a caught-up partition of a transactionally written topic reads 0 or 1.
type Lag struct {
	Reg        *Registry
	Name, Help string
	// Labels are fixed key, value pairs before topic and partition.
	Labels []string
}

// Observe sets the lag of every partition in fs that returned records. A
// nil Lag reports nothing.
func (l *Lag) Observe(fs kgo.Fetches) {
	if l == nil {
		return
	}
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		end := p.LastStableOffset
		if end < 0 {
			end = p.HighWatermark
		}
		next := p.Records[len(p.Records)-1].Offset + 1
		l.gauge(p.Topic, p.Partition).Set(max(0, end-next))
	})
}

// Forget removes the lag of the given partitions (revoked).
func (l *Lag) Forget(topic string, partitions ...int32) {
	for _, p := range partitions {
		l.Reg.Forget(l.Name, l.labels(topic, p)...)
	}
}

func (l *Lag) labels(topic string, p int32) []string {
	return append(slices.Clone(l.Labels), "topic", topic, "partition", strconv.Itoa(int(p)))
}

func (l *Lag) gauge(topic string, p int32) *Gauge {
	return l.Reg.Gauge(l.Name, l.Help, l.labels(topic, p)...)
}

// ConsumerLag returns the Lag of one consumer (a stage, the audit writer)
// as herald_consumer_lag_records{consumer, topic, partition}.
func ConsumerLag(reg *Registry, consumer string) *Lag {
	return &Lag{Reg: reg, Name: "herald_consumer_lag_records",
		Help:   "records between the consumer's position and the partition's last stable offset, measured at each fetch with records",
		Labels: []string{"consumer", consumer}}
}
