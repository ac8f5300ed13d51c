package dedupe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
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
// changelog on the real broker: 200k entries, in herald.seen/v2 (or
// HERALD_BENCH_SEEN_FORMAT=v1: JSON; v3: bucket records).
//
//	HERALD_TEST_KAFKA_BROKERS=127.0.0.1:39092 go test -run '^$' -bench Restore -benchtime 1x ./processors/dedupe
func BenchmarkRestore(b *testing.B) {
	brokers := testenv.Kafka(b)
	const n = 200_000
	cat := testenv.Catalog(b, brokers, 1)
	cl := testenv.Client(b, brokers, kgo.RecordPartitioner(cat.Partitioner()), kgo.ProducerLinger(10*time.Millisecond))
	recs := seenRecords(cat.Name(topics.Seen), 0, n, benchSeenFormat(b))
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
		if err != nil || got != int64(len(recs)) || task.Len() != n {
			b.Fatalf("restored %d records, %d keys, err %v; want %d", got, task.Len(), err, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "keys/s")
}

// BenchmarkRestoreInstance measures what one instance restores when it is
// assigned 12 partitions at once: 12 × HERALD_BENCH_RESTORE_KEYS (100,000
// by default) herald.seen entries on the real broker, each partition read
// read_committed into its own Task by stage.RestorePartition, with
// parallel partitions at a time (the stage's RestoreParallelism: 4 by
// default; 12 is every assigned partition at once), in herald.seen/v2 (or
// HERALD_BENCH_SEEN_FORMAT=v1: JSON; v3: bucket records). keys/s is the
// instance's rate: every key over the wall time of the whole restore.
//
//	HERALD_TEST_KAFKA_BROKERS=127.0.0.1:39092 HERALD_BENCH_RESTORE_KEYS=1000000 go test -run '^$' -bench RestoreInstance -benchtime 1x -timeout 30m ./processors/dedupe
func BenchmarkRestoreInstance(b *testing.B) {
	brokers := testenv.Kafka(b)
	const partitions = 12
	perPartition := 100_000
	if v := os.Getenv("HERALD_BENCH_RESTORE_KEYS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("HERALD_BENCH_RESTORE_KEYS=%q is not a positive integer", v)
		}
		perPartition = n
	}
	cat := testenv.Catalog(b, brokers, partitions)
	cl := testenv.Client(b, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(10*time.Millisecond),
		kgo.MaxBufferedRecords(100_000))
	records := 0 // a partition's
	for p := range int32(partitions) {
		recs := seenRecords(cat.Name(topics.Seen), p, perPartition, benchSeenFormat(b))
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		records = len(recs)
	}
	for _, parallel := range []int{4, partitions} {
		b.Run(fmt.Sprintf("parallel=%d", parallel), func(b *testing.B) {
			var elapsed time.Duration
			for range b.N {
				start := time.Now()
				sem := make(chan struct{}, parallel)
				errs := make(chan error, partitions)
				for p := range int32(partitions) {
					go func() {
						sem <- struct{}{}
						defer func() { <-sem }()
						task := NewTask(DefaultPolicy(), TopicsOf(cat), p)
						got, err := stage.RestorePartition(context.Background(), cl, []string{cat.Name(topics.Seen)}, p, task)
						if err == nil && (got != int64(records) || task.Len() != perPartition) {
							err = fmt.Errorf("partition %d: restored %d records, %d keys; want %d", p, got, task.Len(), perPartition)
						}
						errs <- err
					}()
				}
				for range partitions {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(partitions*perPartition*b.N)/elapsed.Seconds(), "keys/s")
		})
	}
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
