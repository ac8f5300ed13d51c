package route

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// benchWork is the crash test's world and workload (rate limits, digests,
// quiet hours, opt-outs, 0–4 devices), n notifications.
func benchWork(n int) (StaticDirectory, []timed) {
	dir, users := crashWorld()
	return dir, crashWorkload(rand.New(rand.NewPCG(1, 2)), users, n, 4, time.UnixMilli(1_764_500_000_000))
}

// BenchmarkTaskProcess measures the route stage's per-record work without
// Kafka: decode, decide, encode decisions, state changes and delivery
// commands.
//
//	go test -run '^$' -bench TaskProcess -benchtime 200000x ./processors/route
func BenchmarkTaskProcess(b *testing.B) {
	dir, work := benchWork(20_000)
	recs := make([]*kgo.Record, len(work))
	for i, w := range work {
		v, _ := schemas.Encode(&w.n)
		recs[i] = &kgo.Record{Topic: "accepted", Value: v, Offset: int64(i), Timestamp: w.at}
	}
	var outputs int
	b.ResetTimer()
	task := NewTask(crashPolicy, testTopics, 0, dir, nil)
	for i := 0; i < b.N; i++ {
		if i%len(recs) == 0 {
			task = NewTask(crashPolicy, testTopics, 0, dir, nil)
		}
		var out stage.Out
		if err := task.Process(recs[i%len(recs)], &out); err != nil {
			b.Fatal(err)
		}
		outputs += out.Len()
		if i%1000 == 999 {
			task.Commit()
		}
	}
	b.ReportMetric(float64(outputs)/float64(b.N), "outputs/op")
}

// BenchmarkStageOnKafka measures the route stage end to end on the real
// broker, exactly-once on: 30k accepted notifications already in Kafka,
// the crash test's devices and preferences, one instance, until every
// input offset is committed. Beside the dedupe stage's benchmark of the
// same name.
//
//	HERALD_TEST_KAFKA_BROKERS=127.0.0.1:39092 go test -run '^$' -bench StageOnKafka -benchtime 1x ./processors/route
func BenchmarkStageOnKafka(b *testing.B) {
	brokers := testenv.Kafka(b)
	const n = 30_000
	dir, work := benchWork(n)
	var elapsed time.Duration
	for range b.N {
		cat := testenv.Catalog(b, brokers, 4)
		var recs []*kgo.Record
		for _, who := range dir {
			for _, d := range who.Devices {
				recs = append(recs, encoded(b, cat.Name(topics.Devices), schemas.DeviceKey(d.Tenant, d.Recipient, d.DeviceID), &d, work[0].at))
			}
			if who.Prefs != nil {
				recs = append(recs, encoded(b, cat.Name(topics.Preferences), schemas.RecipientKey("acme", who.Prefs.Recipient), who.Prefs, work[0].at))
			}
		}
		for _, w := range work[:n] {
			recs = append(recs, encoded(b, cat.Name(topics.Accepted), schemas.RecipientKey(w.n.Tenant, w.n.Recipient), &w.n, w.at))
		}
		produce(b, brokers, cat, recs)
		group := "g-" + cat.Name("")
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		start := time.Now()
		go func() {
			defer wg.Done()
			Run(ctx, Options{
				Instance:   stage.Instance{Brokers: brokers, Group: group, InstanceID: "bench", MaxBatchRecords: 5000, BatchInterval: 2 * time.Second},
				Catalog:    cat,
				Policy:     crashPolicy,
				TimerGrace: 100000 * time.Hour,
			})
		}()
		testenv.WaitCommitted(b, brokers, group, cat.Name(topics.Accepted), n)
		elapsed += time.Since(start)
		cancel()
		wg.Wait()
	}
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "records/s")
}
