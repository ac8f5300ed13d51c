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

// fillSlab emits n records from s as a transaction would: each a key and a
// value of a few hundred bytes that say which transaction and record they
// are.
func fillSlab(s *slab, txn, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		key := s.bytes(fmt.Appendf(s.reserve(textRoom), "txn %d key %d", txn, i))
		value := fmt.Appendf(s.reserve(valueRoom), "txn %d value %d %0300d", txn, i, i)
		recs[i] = s.recordOf("seen", key, value, seenV2Headers, int64(i))
	}
	return recs
}

// checkSlab fails unless recs are the records fillSlab(_, txn, len(recs))
// returned, unchanged.
func checkSlab(t *testing.T, recs []*kgo.Record, txn int) {
	t.Helper()
	for i, r := range recs {
		key, value := fmt.Sprintf("txn %d key %d", txn, i), fmt.Sprintf("txn %d value %d %0300d", txn, i, i)
		if string(r.Key) != key || string(r.Value) != value || r.Topic != "seen" || r.Timestamp.UnixMilli() != int64(i) {
			t.Fatalf("record %d of transaction %d: key %q, value %.40q…, topic %q; want key %q, value %.40q…",
				i, txn, r.Key, r.Value, r.Topic, key, value)
		}
	}
}

func TestSlab(t *testing.T) {
	// More records and bytes than one chunk holds, so that a transaction
	// spans several chunks of each kind.
	const n = 3 * slabRecords
	t.Run("a transaction's records stay as emitted until release", func(t *testing.T) {
		var s slab
		recs := fillSlab(&s, 1, n)
		checkSlab(t, recs, 1)
		more := fillSlab(&s, 1, n) // still the same transaction
		checkSlab(t, recs, 1)
		checkSlab(t, more, 1)
	})
	t.Run("after release the next transaction reuses the chunks and allocates none", func(t *testing.T) {
		var s slab
		fillSlab(&s, 1, n)
		s.release()
		recs := make([]*kgo.Record, n) // the test's own, allocated before counting
		allocs := testing.AllocsPerRun(10, func() {
			for i := range recs {
				key := s.bytes(append(s.reserve(textRoom), "key"...))
				recs[i] = s.recordOf("seen", key, append(s.reserve(valueRoom), make([]byte, 300)...), nil, 0)
			}
			s.release()
		})
		if allocs != 0 {
			t.Fatalf("%.1f allocations per transaction after the first, want 0", allocs)
		}
	})
	t.Run("a reused record starts zero", func(t *testing.T) {
		var s slab
		r := s.newRecord()
		r.Partition, r.Offset, r.ProducerID = 7, 9, 11 // as the producer stamps it
		s.release()
		if again := s.newRecord(); again != r || again.Partition != 0 || again.Offset != 0 || again.ProducerID != 0 {
			t.Fatalf("reused record %p (first %p): partition %d, offset %d, producer id %d; want the same record, zero",
				again, r, again.Partition, again.Offset, again.ProducerID)
		}
	})
	t.Run("the next transaction's records are the last one's, every chunk of them", func(t *testing.T) {
		var s slab
		first := map[*kgo.Record]bool{}
		for _, r := range fillSlab(&s, 1, n) {
			first[r] = true
		}
		s.release()
		second := fillSlab(&s, 2, n)
		checkSlab(t, second, 2)
		for i, r := range second {
			if !first[r] {
				t.Fatalf("record %d of the second transaction is not one of the first's", i)
			}
		}
	})
	t.Run("the slab keeps only the chunks its last transaction used", func(t *testing.T) {
		var s slab
		fillSlab(&s, 1, 10*slabRecords)
		s.release()
		big := len(s.freeRecs)
		fillSlab(&s, 2, 10)
		s.release()
		if len(s.freeRecs) != 0 || len(s.freeBufs) != 0 || big == 0 {
			t.Fatalf("after a transaction of 10 records the slab keeps %d record and %d byte chunks (after 2,560 records: %d); want 0",
				len(s.freeRecs), len(s.freeBufs), big)
		}
	})
}

func TestTaskReusesItsRecordsAfterTheTransactionEnds(t *testing.T) {
	reqs, _ := crashWorkload(rand.New(rand.NewPCG(5, 6)))
	recs := make([]*kgo.Record, 600)
	for i := range recs {
		v, err := schemas.Encode(reqs[i])
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = &kgo.Record{Topic: "requests", Value: v, Offset: int64(i), Timestamp: taskBase.Add(time.Duration(i) * time.Millisecond)}
	}
	for _, end := range []string{"Commit", "Abort"} {
		t.Run("after "+end+" the next transaction's records are the last one's", func(t *testing.T) {
			task := NewTask(DefaultPolicy(), testTopics, 0)
			// The per-key layout: records enough that the chunk the first
			// transaction ends in is a small part of them.
			task.SeenPerKey = true
			transaction := func(recs []*kgo.Record) []*kgo.Record {
				var out stage.Out
				for _, r := range recs {
					if err := task.Process(r, &out); err != nil {
						t.Fatal(err)
					}
				}
				task.Tick(&out)
				return outRecords(&out)
			}
			first := map[*kgo.Record]bool{}
			for _, r := range transaction(recs[:300]) {
				first[r] = true
			}
			if end == "Commit" {
				task.Commit()
			} else {
				task.Abort()
			}
			// The same requests again after an abort, as the runtime
			// retries them; the next ones after a commit.
			next := recs[:300]
			if end == "Commit" {
				next = recs[300:]
			}
			second := transaction(next)
			reused := 0
			for _, r := range second {
				if first[r] {
					reused++
				}
			}
			if reused == 0 || reused < min(len(first), len(second))*9/10 {
				t.Fatalf("%d of the second transaction's %d records were the first's %d", reused, len(second), len(first))
			}
		})
	}
}
