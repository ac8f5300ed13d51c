package metrics

import (
	"strings"
	"testing"
)

func TestRegistryWritesPrometheusText(t *testing.T) {
	r := NewRegistry()
	r.Counter("herald_records_total", "records processed", "stage", "dedupe").Add(3)
	r.Counter("herald_records_total", "records processed", "stage", "dedupe").Inc()
	r.Gauge("herald_partitions", "partitions owned").Set(2)
	var b strings.Builder
	r.WriteTo(&b)
	want := `# HELP herald_partitions partitions owned
# TYPE herald_partitions gauge
herald_partitions 2
# HELP herald_records_total records processed
# TYPE herald_records_total counter
herald_records_total{stage="dedupe"} 4
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
