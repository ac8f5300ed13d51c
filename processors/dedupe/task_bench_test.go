package dedupe

import (
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
