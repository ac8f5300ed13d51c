package dedupe

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
)

// BenchmarkSeenSetMemory measures what a live seen-set key costs: the
// task's committed seen-set is filled with n keys (half idempotency, half
// dedupe entries, each with its expiry queued, committed 10,000 at a time
// as transactions would), then bytes/key is the growth of the heap in use
// after a full collection divided by n, and gc-ms the time of one full
// collection with the seen-set live (its work grows with the pointers on
// the heap, not with its bytes). Both are reported metrics, never
// asserted.
//
//	go test -run '^$' -bench SeenSetMemory -benchtime 1x ./processors/dedupe
func BenchmarkSeenSetMemory(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			for range b.N {
				before := testenv.HeapInUse()
				task := NewTask(DefaultPolicy(), testTopics, 0)
				fillSeenSet(task, n)
				after := testenv.HeapInUse()
				start := time.Now()
				runtime.GC()
				gc := time.Since(start)
				if task.Len() != n {
					b.Fatalf("%d keys, want %d", task.Len(), n)
				}
				b.ReportMetric(float64(after-before)/float64(n), "bytes/key")
				b.ReportMetric(float64(gc.Microseconds())/1000, "gc-ms")
				runtime.KeepAlive(task)
			}
		})
	}
}

// fillSeenSet commits n distinct entries into task as its transactions
// would: set in the open transaction, queued for expiry, committed.
func fillSeenSet(task *Task, n int) {
	x := uint64(0x9e3779b97f4a7c15)
	next := func() uint64 { // splitmix64: uniform ids without hashing
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	}
	for i := range n {
		var k seenKey
		binary.LittleEndian.PutUint64(k.id[:8], next())
		binary.LittleEndian.PutUint64(k.id[8:], next())
		k.kind = kindDedupe
		if i%2 == 0 {
			k.kind = kindIdem
		}
		v := seenVal{firstAt: int64(i), expiresAt: int64(i) + 3600_000, offset: int64(i), outcome: outcomeAccepted, flags: flagContent}
		binary.LittleEndian.PutUint64(v.notification[:8], next())
		binary.LittleEndian.PutUint64(v.request[:8], next())
		binary.LittleEndian.PutUint64(v.content[:8], next())
		task.setPending(k, pendingVal{val: v})
		task.pendQ.push(expiryItem{key: k, at: v.expiresAt})
		if i%10_000 == 9_999 || i == n-1 {
			task.Commit()
		}
	}
}

// BenchmarkSeenSetCopyMemory measures what a key of the API's copy of the
// seen-set costs: n herald.seen records of distinct dedupe keys
// (herald.seen/v2, as the stage writes them; see seenRecords) applied
// to a SeenSet, and, beside it, to a map of decoded entries (how the API
// kept its copy before SeenSet). bytes/key and gc-ms as in
// BenchmarkSeenSetMemory (the records applied are dropped before the
// collection is timed); reported, never asserted.
//
//	go test -run '^$' -bench SeenSetCopyMemory -benchtime 1x ./processors/dedupe
func BenchmarkSeenSetCopyMemory(b *testing.B) {
	const n = 1_000_000
	for _, c := range []struct {
		name  string
		apply func(records []*kgo.Record) (keys int, keep any)
	}{
		{"SeenSet", func(records []*kgo.Record) (int, any) {
			set := NewSeenSet()
			for _, r := range records {
				if err := set.Apply(r); err != nil {
					b.Fatal(err)
				}
			}
			return set.Len(), set
		}},
		{"map of decoded entries", func(records []*kgo.Record) (int, any) {
			m := map[string]schemas.SeenEntry{}
			var dec schemas.Decoder
			for _, r := range records {
				var e schemas.SeenEntry
				if err := dec.Decode(r.Value, &e); err != nil {
					b.Fatal(err)
				}
				m[string(r.Key)] = e
			}
			return len(m), m
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				recs := seenRecords("seen", 0, n, schemas.SeenEntryV2)
				before := testenv.HeapInUse()
				keys, keep := c.apply(recs)
				after := testenv.HeapInUse()
				runtime.KeepAlive(recs) // in both heap figures
				runtime.GC()            // frees them: the collection timed is of the copy alone
				start := time.Now()
				runtime.GC()
				gc := time.Since(start)
				if keys != n {
					b.Fatalf("%d keys, want %d", keys, n)
				}
				b.ReportMetric(float64(after-before)/n, "bytes/key")
				b.ReportMetric(float64(gc.Microseconds())/1000, "gc-ms")
				runtime.KeepAlive(keep)
			}
		})
	}
}
