package dedupe

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

// BenchmarkTaskProcess measures the stage's per-record work without Kafka:
// decode, decide, encode the decision, seen-set changes and accepted record.
// As in the stage, records are emitted into one stage.Out per transaction
// of 1,000 requests, committed at its end.
//
//	go test -run '^$' -bench TaskProcess -benchmem ./processors/dedupe
func BenchmarkTaskProcess(b *testing.B) {
	reqs, _ := crashWorkload(rand.New(rand.NewPCG(1, 2)))
	recs := make([]*kgo.Record, len(reqs))
	for i, r := range reqs {
		v, _ := schemas.Encode(r)
		recs[i] = &kgo.Record{Topic: "requests", Value: v, Offset: int64(i), Timestamp: time.UnixMilli(int64(i))}
	}
	b.ReportAllocs()
	b.ResetTimer()
	task := NewTask(DefaultPolicy(), testTopics, 0)
	out := new(stage.Out)
	for i := 0; i < b.N; i++ {
		if i%len(recs) == 0 {
			task = NewTask(DefaultPolicy(), testTopics, 0)
		}
		if err := task.Process(recs[i%len(recs)], out); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			task.Commit()
			out = new(stage.Out)
		}
	}
}

// BenchmarkTaskRestore measures Task.Restore alone, without Kafka: one
// herald.seen record (as the stage writes it) read into the seen-set per
// op, 100,000 distinct keys per task.
//
//	go test -run '^$' -bench TaskRestore -benchmem ./processors/dedupe
func BenchmarkTaskRestore(b *testing.B) {
	const n = 100_000
	recs := seenRecords("seen", n)
	b.ReportAllocs()
	b.ResetTimer()
	var task *Task
	for i := 0; i < b.N; i++ {
		if i%n == 0 {
			task = NewTask(DefaultPolicy(), testTopics, 0)
		}
		if err := task.Restore(recs[i%n]); err != nil {
			b.Fatal(err)
		}
	}
}

// seenRecords is n herald.seen records of distinct dedupe keys, encoded
// as the stage encodes them.
func seenRecords(topic string, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range n {
		e := schemas.SeenEntry{Kind: schemas.SeenDedupe, Scope: fmt.Sprintf("%032x", i), NotificationID: fmt.Sprintf("%032x", i),
			RequestID: fmt.Sprintf("%032x", i), ContentHash: fmt.Sprintf("%064x", i), Outcome: schemas.DecisionAccepted,
			FirstAt: int64(i), ExpiresAt: int64(i) + 3600_000, SourceOffset: int64(i)}
		v, _ := schemas.Encode(&e)
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(schemas.SeenKey(e.Kind, e.Scope)), Value: v}
	}
	return recs
}
