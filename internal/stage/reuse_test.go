package stage_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
)

// reusing wraps a task and reuses its outputs' memory as soon as
// Task.Commit allows: when the transaction is committed or aborted, its
// records are overwritten (their values' bytes in place, their keys and
// values replaced), as the dedupe task's slab may hand their memory out
// again from then on. A runtime that still held or read them would write
// or report the overwritten bytes.
type reusing struct {
	stage.Task
	emitted []*kgo.Record
}

func (r *reusing) Process(rec *kgo.Record, out *stage.Out) error {
	from := out.Len()
	err := r.Task.Process(rec, out)
	r.emitted = append(r.emitted, out.Records()[from:]...)
	return err
}

func (r *reusing) Tick(out *stage.Out) {
	from := out.Len()
	r.Task.Tick(out)
	r.emitted = append(r.emitted, out.Records()[from:]...)
}

func (r *reusing) Commit() { r.Task.Commit(); r.overwrite() }
func (r *reusing) Abort()  { r.Task.Abort(); r.overwrite() }

func (r *reusing) overwrite() {
	for _, rec := range r.emitted {
		for i := range rec.Value {
			rec.Value[i] = '#'
		}
		rec.Key, rec.Value = []byte("reused"), []byte("reused")
	}
	r.emitted = nil
}

// TestATaskMayReuseItsOutputsOnceTheTransactionEnds holds the runtime to
// what Task.Commit promises: it is done with a transaction's records when
// it calls Commit or Abort, so every output reaches the topics as the task
// emitted it; here in transactions that commit, their outputs handed to
// the producer while the batch is processed. (An aborted transaction's
// case, where the runtime writes a dead letter in place of an output, is
// TestATimersOutputThatCanNeverBeWrittenIsDeadLetteredInItsPlace, whose
// task is reusing too.)
func TestATaskMayReuseItsOutputsOnceTheTransactionEnds(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		stage.SetProduceChunk(t, 7)
		r := newRig(t, brokers, opts, 2, nil)
		const n = 300
		want := r.produceDistinct(n)
		cfg := r.config()
		newCounter := cfg.NewTask
		cfg.NewTask = func(p int32) stage.Task { return &reusing{Task: newCounter(p)} }
		cfg.MaxBatchRecords = 40
		s := r.start(cfg)
		if got := r.awaitOut(s, n); !equal(got, want) {
			t.Fatalf("outputs %v, want each key once with count 1", got)
		}
		for _, rec := range testenv.ReadCommitted(t, brokers, r.changelog, opts...) {
			if string(rec.Value) != "1" || string(rec.Key) == "reused" {
				t.Fatalf("changelog record %q=%q, want every key's count 1", rec.Key, rec.Value)
			}
		}
	})
}

func TestAnOutResetForTheNextTransactionHoldsNoneOfTheLastOnesRecords(t *testing.T) {
	var out stage.Out
	a, b := &kgo.Record{Key: []byte("a")}, &kgo.Record{Key: []byte("b")}
	out.Emit(a)
	out.Emit(b)
	held := out.Records()
	out.Reset()
	if out.Len() != 0 || len(out.Records()) != 0 {
		t.Fatalf("%d records after the reset, want none", out.Len())
	}
	for i, r := range held[:2] {
		if r != nil {
			t.Errorf("slot %d still points at record %q: the reset out keeps it alive", i, r.Key)
		}
	}
	if string(a.Key) != "a" || string(b.Key) != "b" {
		t.Fatal("the reset changed the records it held, which the producer may still hold")
	}
	out.Emit(b)
	if got := out.Records(); len(got) != 1 || got[0] != b {
		t.Fatalf("after the reset, emitting one record gives %v", got)
	}
}
