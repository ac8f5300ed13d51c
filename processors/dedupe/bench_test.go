package dedupe

import (
	"context"
	"fmt"
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

// BenchmarkStageOnKafka measures the dedupe stage end to end on the real
// broker, exactly-once on: 30k requests (30% repeats) already in the
// requests topic, one instance, until every input offset is committed.
// Sub-benchmarks vary the most records per transaction.
//
//	scripts/kafka/kafka start
//	HERALD_TEST_KAFKA_BROKERS=127.0.0.1:39092 go test -run '^$' -bench StageOnKafka -benchtime 1x ./processors/dedupe
func BenchmarkStageOnKafka(b *testing.B) {
	brokers := testenv.Kafka(b)
	const n = 30_000
	rng := rand.New(rand.NewPCG(1, 2))
	reqs, _ := crashWorkload(rng)
	reqs = reqs[:n]
	for _, size := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("txn=%d", size), func(b *testing.B) {
			var elapsed time.Duration
			for range b.N {
				cat := testenv.Catalog(b, brokers, 4)
				produceBench(b, brokers, cat, reqs)
				group := "g-" + cat.Name("")
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				wg.Add(1)
				start := time.Now()
				go func() {
					defer wg.Done()
					Run(ctx, Options{
						Instance: stage.Instance{Brokers: brokers, Group: group, InstanceID: "bench", MaxBatchRecords: size, BatchInterval: 2 * time.Second},
						Catalog:  cat,
					})
				}()
				testenv.WaitCommitted(b, brokers, group, cat.Name(topics.Requests), n)
				elapsed += time.Since(start)
				cancel()
				wg.Wait()
			}
			b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "records/s")
		})
	}
}

// BenchmarkRestore measures restoring one partition's seen-set from the
// changelog on the real broker: 200k entries.
//
//	HERALD_TEST_KAFKA_BROKERS=127.0.0.1:39092 go test -run '^$' -bench Restore -benchtime 1x ./processors/dedupe
func BenchmarkRestore(b *testing.B) {
	brokers := testenv.Kafka(b)
	const n = 200_000
	cat := testenv.Catalog(b, brokers, 1)
	cl := testenv.Client(b, brokers, kgo.RecordPartitioner(cat.Partitioner()), kgo.ProducerLinger(10*time.Millisecond))
	recs := seenRecords(cat.Name(topics.Seen), n)
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var elapsed time.Duration
	for range b.N {
		task := NewTask(DefaultPolicy(), TopicsOf(cat), 0)
		start := time.Now()
		got, err := stage.RestorePartition(context.Background(), cl, []string{cat.Name(topics.Seen)}, 0, task)
		elapsed += time.Since(start)
		if err != nil || got != n || task.Len() != n {
			b.Fatalf("restored %d records, %d keys, err %v; want %d", got, task.Len(), err, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "keys/s")
}

func produceBench(b *testing.B, brokers []string, cat *topics.Catalog, reqs []schemas.Request) {
	b.Helper()
	cl := testenv.Client(b, brokers, kgo.RecordPartitioner(cat.Partitioner()), kgo.ProducerLinger(5*time.Millisecond))
	recs := make([]*kgo.Record, len(reqs))
	for i, r := range reqs {
		v, _ := schemas.Encode(r)
		recs[i] = &kgo.Record{Topic: cat.Name(topics.Requests), Key: []byte(r.NotificationID), Value: v}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
}

// waitCommitted polls the group's committed offsets until they sum to n.
