package dedupe

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/schemas/seenpb"
)

// BenchmarkTaskProcess measures the stage's per-record work without Kafka:
// decode, decide, encode the decision, seen-set changes and accepted record.
// As in the stage, records are emitted into one stage.Out, reset for each
// transaction of 1,000 requests, committed at its end; requests, decisions and
// accepted records in either format (v2: Protocol Buffers, v1: JSON), seen
// entries in either format.
//
//	go test -run '^$' -bench TaskProcess -benchmem ./processors/dedupe
func BenchmarkTaskProcess(b *testing.B) {
	reqs, _ := crashWorkload(rand.New(rand.NewPCG(1, 2)))
	for _, records := range []schemas.Format{schemas.FormatBinary, schemas.FormatJSON} {
		recs := requestRecords(b, reqs, records)
		for _, seen := range []string{SeenBatchV3, schemas.SeenEntryV2, schemas.SeenEntryV1} {
			b.Run("records="+string(records)+"/seen="+seen, func(b *testing.B) {
				b.ReportAllocs()
				newTask := func() *Task {
					t := NewTask(DefaultPolicy(), testTopics, 0)
					t.SeenJSON = seen == schemas.SeenEntryV1
					t.SeenPerKey = seen != SeenBatchV3
					t.RecordFormat = records
					return t
				}
				task := newTask()
				out := new(stage.Out)
				var in, written int // value bytes read and written
				count := func() {
					for _, r := range out.Records() {
						written += len(r.Value)
					}
				}
				for i := 0; i < b.N; i++ {
					if i%len(recs) == 0 {
						task = newTask()
					}
					in += len(recs[i%len(recs)].Value)
					if err := task.Process(recs[i%len(recs)], out); err != nil {
						b.Fatal(err)
					}
					if i%1000 == 999 {
						task.Tick(out) // as the runtime does after a batch
						task.Commit()
						b.StopTimer()
						count()
						b.StartTimer()
						out.Reset() // as the runtime does between transactions
					}
				}
				count()
				b.ReportMetric(float64(in)/float64(b.N), "in-B/req")
				b.ReportMetric(float64(written)/float64(b.N), "out-B/req")
			})
		}
	}
}

// BenchmarkTaskProcessSteady is BenchmarkTaskProcess (v2 records and
// seen entries) on one long-lived task in its steady state, as in a stage
// that has run for days: the same stream replayed pass after pass, its
// records a second apart in stream time, so that every key expires, and
// is tombstoned, before the next pass sends it again. The seen-set neither
// grows nor empties. Its dedupe window is 2 h, longer than the default
// hour, so that it spans every repeat (at most about 4,300 records, 72
// minutes, after its original); its idempotency TTL (24 h) ends before
// the pass does (about 103,000 records, 28.6 h). One pass runs before the
// timer starts. BenchmarkTaskProcess instead starts a new, empty task
// every pass: it pays for the seen-set's growth, and never for expiry.
// The outputs per request here include the tombstones of expiring keys
// (tombstones/req); accepted/req is the share of requests accepted: 0.70
// over whole passes, as in BenchmarkTaskProcess (a run that ends within a
// pass reads a little above, as a pass's originals come before most of
// its repeats).
//
//	go test -run '^$' -bench TaskProcessSteady -benchmem ./processors/dedupe
func BenchmarkTaskProcessSteady(b *testing.B) {
	const step = 1000 // ms of stream time from one record to the next
	reqs, _ := crashWorkload(rand.New(rand.NewPCG(1, 2)))
	recs := requestRecords(b, reqs, schemas.FormatBinary)
	for _, seen := range []string{SeenBatchV3, schemas.SeenEntryV2} {
		b.Run("seen="+seen, func(b *testing.B) {
			b.ReportAllocs()
			policy := DefaultPolicy()
			policy.DefaultWindowMs = 2 * 3600_000
			task := NewTask(policy, testTopics, 0)
			task.RecordFormat = schemas.FormatBinary
			task.SeenPerKey = seen != SeenBatchV3
			out := new(stage.Out)
			var accepted, seenRecords, tombstones int
			n := 0 // records processed: each record's offset, and its time in steps
			process := func(count bool) {
				r := recs[n%len(recs)]
				r.Offset, r.Timestamp = int64(n), time.UnixMilli(int64(n)*step)
				n++
				if err := task.Process(r, out); err != nil {
					b.Fatal(err)
				}
				if n%1000 == 0 {
					task.Tick(out) // as the runtime does after a batch
					task.Commit()
					if count {
						b.StopTimer()
						for _, o := range out.Records() {
							if o.Topic == testTopics.Accepted {
								accepted++
							} else if o.Topic == testTopics.Seen {
								seenRecords++
								if o.Value == nil {
									tombstones++
								}
							}
						}
						b.StartTimer()
					}
					out.Reset()
				}
			}
			for range len(recs) {
				process(false)
			}
			b.ResetTimer()
			for range b.N {
				process(true)
			}
			b.StopTimer()
			if counted := b.N / 1000 * 1000; counted > 0 {
				b.ReportMetric(float64(accepted)/float64(counted), "accepted/req")
				b.ReportMetric(float64(seenRecords)/float64(counted), "seen/req")
				b.ReportMetric(float64(tombstones)/float64(counted), "tombstones/req")
			}
		})
	}
}

// requestRecords is reqs as records of the requests topic in format, the
// i-th at offset i and i milliseconds.
func requestRecords(b *testing.B, reqs []schemas.Request, format schemas.Format) []*kgo.Record {
	recs := make([]*kgo.Record, len(reqs))
	for i, r := range reqs {
		r.Schema = format.RequestSchema()
		v, err := schemas.Encode(r)
		if err != nil {
			b.Fatal(err)
		}
		recs[i] = &kgo.Record{Topic: "requests", Value: v, Offset: int64(i), Timestamp: time.UnixMilli(int64(i))}
	}
	return recs
}

// BenchmarkTaskRestore measures Task.Restore alone, without Kafka: one
// herald.seen record (as the stage writes it, in either format) read into
// the seen-set per op, 100,000 distinct keys per task.
//
//	go test -run '^$' -bench TaskRestore -benchmem ./processors/dedupe
func BenchmarkTaskRestore(b *testing.B) {
	const n = 100_000
	for _, format := range []string{SeenBatchV3, schemas.SeenEntryV2, schemas.SeenEntryV1} {
		b.Run("format="+format, func(b *testing.B) {
			recs := seenRecords("seen", 0, n, format)
			b.ReportAllocs()
			b.ResetTimer()
			var task *Task
			// An op is a key: a bucket record (v3) restores many.
			for i, next := 0, 0; i < b.N; next++ {
				if next%len(recs) == 0 {
					task = NewTask(DefaultPolicy(), testTopics, 0)
				}
				// Not Len: it settles the restore (a sweep of the whole set).
				before := task.seen[0].len() + task.seen[1].len()
				if err := task.Restore(recs[next%len(recs)]); err != nil {
					b.Fatal(err)
				}
				i += task.seen[0].len() + task.seen[1].len() - before
			}
		})
	}
}

// seenRecords is n herald.seen records of distinct dedupe keys for
// partition, encoded as the stage encodes them in format
// (schemas.SeenEntryV1 or V2). Their SourcePartition is partition, as in
// the stage's changelog: an entry from another partition is kept on the
// seen-set's side map, the slow path.
func seenRecords(topic string, partition int32, n int, format string) []*kgo.Record {
	recs := make([]*kgo.Record, 0, n)
	inBatch := 0 // entries in the last bucket record (v3)
	for i := range n {
		e := schemas.SeenEntry{Kind: schemas.SeenDedupe, Scope: fmt.Sprintf("%032x", i), NotificationID: fmt.Sprintf("%032x", i),
			RequestID: fmt.Sprintf("%032x", i), ContentHash: fmt.Sprintf("%064x", i), Outcome: schemas.DecisionAccepted,
			FirstAt: int64(i), ExpiresAt: int64(i) + 3600_000, SourcePartition: partition, SourceOffset: int64(i)}
		if format == SeenBatchV3 {
			recs = appendBatchRecord(recs, &inBatch, topic, partition, &e)
			continue
		}
		var v []byte
		var err error
		if format == schemas.SeenEntryV2 {
			v, err = schemas.AppendSeenV2(nil, &e)
		} else {
			v, err = schemas.Encode(&e)
		}
		if err != nil {
			panic(err)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: partition, Key: []byte(schemas.SeenKey(e.Kind, e.Scope)), Value: v,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(format)}}})
	}
	return recs
}

// appendBatchRecord adds e to the last of recs, a bucket record whose
// entries count is counted by n, or to a new one when that is full or of
// another bucket (herald.seen/v3, as the stage writes it: batchEntries
// entries at most).
func appendBatchRecord(recs []*kgo.Record, n *int, topic string, partition int32, e *schemas.SeenEntry) []*kgo.Record {
	v2, err := schemas.AppendSeenV2(nil, e)
	if err != nil {
		panic(err)
	}
	var m seenpb.SeenEntry
	if err := m.UnmarshalVT(v2); err != nil {
		panic(err)
	}
	end := bucketEnd(e.ExpiresAt)
	var last int64
	var seq uint32
	if len(recs) > 0 {
		last, seq, _ = parseBucketKey(recs[len(recs)-1].Key)
	}
	if len(recs) == 0 || last != end || *n == batchEntries {
		if len(recs) == 0 || last != end {
			seq = 0
		} else {
			seq++
		}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: partition, Key: appendBucketKey(nil, end, seq),
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(SeenBatchV3)}}})
		*n = 0
	}
	r := recs[len(recs)-1]
	r.Value = appendBatchEntry(r.Value, &m)
	*n++
	return recs
}

// benchSeenFormat is the herald.seen format of the restore benchmarks on
// Kafka: HERALD_BENCH_SEEN_FORMAT, "v1" (JSON) or "v2" (the default).
func benchSeenFormat(b *testing.B) string {
	switch f := os.Getenv("HERALD_BENCH_SEEN_FORMAT"); f {
	case "", "v2":
		return schemas.SeenEntryV2
	case "v1":
		return schemas.SeenEntryV1
	case "v3":
		return SeenBatchV3
	default:
		b.Fatalf("HERALD_BENCH_SEEN_FORMAT=%q: want v1, v2 or v3", f)
		return ""
	}
}
