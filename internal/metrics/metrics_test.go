package metrics_test

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/testenv"
)

// scrape serves reg over HTTP and parses the answer as Prometheus would.
func scrape(t *testing.T, reg *metrics.Registry) testenv.Metrics {
	t.Helper()
	srv := httptest.NewServer(reg.Handler())
	defer srv.Close()
	return testenv.Scrape(t, srv.URL)
}

func TestRegistryServesWhatItsMetricsCount(t *testing.T) {
	r := metrics.NewRegistry()
	r.Counter("herald_records_total", "records processed", "stage", "dedupe").Add(3)
	r.Counter("herald_records_total", "records processed", "stage", "dedupe").Inc()
	r.Gauge("herald_partitions", "partitions owned").Set(2)
	h := r.Histogram("herald_latency_seconds", "latency", metrics.LatencyBuckets, "stage", "dedupe")
	h.Observe(0.002)
	h.Observe(3)
	fams := scrape(t, r)
	tests := []struct {
		name   string
		metric string
		labels []string
		want   float64
	}{
		{"a counter asked for twice is one series holding both additions", "herald_records_total", []string{"stage", "dedupe"}, 4},
		{"a gauge holds what was set", "herald_partitions", nil, 2},
		{"a histogram counts its observations", "herald_latency_seconds", []string{"stage", "dedupe"}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := fams.Value(tc.metric, tc.labels...)
			if !ok || got != tc.want {
				t.Fatalf("%s%v = %v (present %v), want %v", tc.metric, tc.labels, got, ok, tc.want)
			}
		})
	}
	t.Run("the Go runtime and process collectors are served", func(t *testing.T) {
		for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes"} {
			if _, ok := fams[name]; !ok {
				t.Errorf("%s missing from /metrics", name)
			}
		}
	})
	t.Run("Value reads back counters and gauges", func(t *testing.T) {
		if v := r.Counter("herald_records_total", "", "stage", "dedupe").Value(); v != 4 {
			t.Errorf("counter Value %d, want 4", v)
		}
		if v := r.Gauge("herald_partitions", "").Value(); v != 2 {
			t.Errorf("gauge Value %d, want 2", v)
		}
	})
	t.Run("Names lists herald's families only", func(t *testing.T) {
		if got := fmt.Sprint(r.Names()); got != "[herald_latency_seconds herald_partitions herald_records_total]" {
			t.Errorf("Names() = %s", got)
		}
	})
}

func TestRegistryRefusesOneNameWithTwoShapes(t *testing.T) {
	tests := []struct {
		name   string
		second func(r *metrics.Registry)
	}{
		{"other label names", func(r *metrics.Registry) { r.Counter("herald_x_total", "", "channel", "apns") }},
		{"another kind", func(r *metrics.Registry) { r.Gauge("herald_x_total", "", "stage", "dedupe") }},
	}
	for _, tc := range tests {
		t.Run("a second use with "+tc.name+" panics", func(t *testing.T) {
			r := metrics.NewRegistry()
			r.Counter("herald_x_total", "", "stage", "dedupe")
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tc.second(r)
		})
	}
}

func TestForgetRemovesASeries(t *testing.T) {
	r := metrics.NewRegistry()
	r.Gauge("herald_lag", "", "partition", "0").Set(5)
	r.Gauge("herald_lag", "", "partition", "1").Set(7)
	r.Forget("herald_lag", "partition", "0")
	fams := scrape(t, r)
	if _, ok := fams.Value("herald_lag", "partition", "0"); ok {
		t.Error("forgotten series still served")
	}
	if v, ok := fams.Value("herald_lag", "partition", "1"); !ok || v != 7 {
		t.Errorf("other series = %v, %v; want 7", v, ok)
	}
}

func TestLimitFoldsValuesBeyondItsSizeIntoOther(t *testing.T) {
	l := metrics.NewLimit(2)
	in := []string{"acme", "globex", "acme", "initech", "globex", "umbrella"}
	var got []string
	for _, v := range in {
		got = append(got, l.Value(v))
	}
	want := "[acme globex acme other globex other]"
	if fmt.Sprint(got) != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

func TestLagIsTheDistanceFromTheLastRecordToTheStableEnd(t *testing.T) {
	r := metrics.NewRegistry()
	lag := metrics.ConsumerLag(r, "dedupe")
	part := func(p int32, lso, hwm int64, offsets ...int64) kgo.FetchPartition {
		fp := kgo.FetchPartition{Partition: p, LastStableOffset: lso, HighWatermark: hwm}
		for _, o := range offsets {
			fp.Records = append(fp.Records, &kgo.Record{Topic: "req", Partition: p, Offset: o})
		}
		return fp
	}
	lag.Observe(kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "req", Partitions: []kgo.FetchPartition{
		part(0, 100, 120, 10, 11, 12),
		part(1, 5, 5, 3, 4),
		part(2, -1, 50, 9),
		part(3, 70, 70),
	}}}}})
	fams := scrape(t, r)
	tests := []struct {
		name      string
		partition string
		want      float64
		present   bool
	}{
		{"records behind the last stable offset, not the high watermark", "0", 87, true},
		{"a caught-up partition reads zero", "1", 0, true},
		{"without a last stable offset the high watermark is the end", "2", 40, true},
		{"a partition that returned no records is not measured", "3", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := fams.Value("herald_consumer_lag_records", "consumer", "dedupe", "topic", "req", "partition", tc.partition)
			if ok != tc.present || v != tc.want {
				t.Fatalf("lag of partition %s = %v (present %v), want %v (present %v)", tc.partition, v, ok, tc.want, tc.present)
			}
		})
	}
	lag.Forget("req", 0)
	if _, ok := scrape(t, r).Value("herald_consumer_lag_records", "consumer", "dedupe", "topic", "req", "partition", "0"); ok {
		t.Error("a forgotten partition's lag is still served")
	}
}

func TestDecisionsKeepCopiesOfTheStringsTheyAreGiven(t *testing.T) {
	r := metrics.NewRegistry()
	tally := metrics.NewDecisions(r, "dedupe").Tally()
	buf := []byte("acme" + "invoice.paid" + "accepted") // stands for a record's value, decoded in place
	in := func(from, to int) string { return unsafe.String(&buf[from], to-from) }
	tally.Add(in(0, 4), in(4, 16), in(16, 24))
	tally.Commit()
	for i := range buf {
		buf[i] = 'x' // the record's buffer reused or freed
	}
	fams := scrape(t, r)
	if got, ok := fams.Value("herald_decisions_total", "stage", "dedupe", "tenant", "acme", "type", "invoice.paid", "outcome", "accepted"); !ok || got != 1 {
		t.Fatalf("herald_decisions_total{acme, invoice.paid, accepted} = %v (present %v), want 1: the series' labels changed with the caller's bytes", got, ok)
	}
	tally.Add("acme", "invoice.paid", "accepted")
	tally.Commit()
	if got, _ := scrape(t, r).Value("herald_decisions_total", "stage", "dedupe", "tenant", "acme", "type", "invoice.paid", "outcome", "accepted"); got != 2 {
		t.Fatalf("a second decision of the same tenant and type made another series: count %v, want 2", got)
	}
}
