package sinks_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns"
	"github.com/heraldhq/herald/sinks/apns/emulator"
	"github.com/heraldhq/herald/topics"
)

// BenchmarkSinkThroughput measures one APNs sink instance on the real
// broker against the emulator answering every push in 20 ms: b.N × 20,000
// deliveries, each with its intent, call, attempt, outcome and sent-set
// entry committed. It reports deliveries/s from the first command produced
// to the last outcome counted.
func BenchmarkSinkThroughput(b *testing.B) {
	for _, inFlight := range []int{256, 1000} {
		b.Run(fmt.Sprintf("%d calls in flight", inFlight), func(b *testing.B) {
			brokers := testenv.Kafka(b)
			const perOp = 20_000
			n := b.N * perOp
			cat := testenv.Catalog(b, brokers, 12)
			em, err := emulator.Start(emulator.Options{Latency: 20 * time.Millisecond, MaxRecords: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer em.Close()
			prov, err := apns.New(apns.Config{Host: em.URL(), RootCAs: em.RootCAs(), Topic: "com.example.app"})
			if err != nil {
				b.Fatal(err)
			}
			reg := metrics.NewRegistry()
			r, err := sinks.New(sinks.Options{
				Instance:    stage.Instance{Brokers: brokers, InstanceID: "bench", Metrics: reg, BatchInterval: 50 * time.Millisecond},
				Channel:     "apns",
				Provider:    prov,
				Catalog:     cat,
				MaxInFlight: inFlight,
			})
			if err != nil {
				b.Fatal(err)
			}
			outcomes := reg.Counter("herald_sink_outcomes_total", "", "channel", "apns")
			partitions := reg.Gauge("herald_stage_partitions", "", "stage", "sink-apns")
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); r.Run(ctx) }()
			defer func() { cancel(); wg.Wait() }()
			for partitions.Value() < 12 {
				time.Sleep(50 * time.Millisecond)
			}
			cmds := make([]*schemas.DeliveryCommand, n)
			for i := range cmds {
				cmds[i] = deliveryCmd(fmt.Sprintf("bench-%d", i), fmt.Sprintf("dev%d", i%5000))
			}
			producer := testenv.Client(b, brokers, kgo.RecordPartitioner(cat.Partitioner()))
			b.ResetTimer()
			start := time.Now()
			go produceAll(producer, cat, cmds)
			for outcomes.Value() < int64(n) {
				time.Sleep(10 * time.Millisecond)
			}
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(n)/el.Seconds(), "deliveries/s")
			txns := reg.Counter("herald_stage_transactions_total", "", "stage", "sink-apns", "result", "committed").Value()
			b.ReportMetric(float64(n)/float64(max(txns, 1)), "deliveries/txn")
			// The counter moves when EndTxn returns; the commit markers
			// are written after it, so the last outcomes may take a
			// moment to become readable.
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
				got := len(testenv.ReadCommitted(b, brokers, cat.Name(topics.Outcomes)))
				if got == n {
					break
				}
				if got > n || time.Now().After(deadline) {
					b.Fatalf("%d outcomes committed, want %d", got, n)
				}
			}
		})
	}
}
