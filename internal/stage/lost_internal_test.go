package stage

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ticking is a task that emits one record per Tick on its own partition of
// out and records what the runtime tells it.
type ticking struct {
	p      int32
	ticks  int
	events *[]string
}

func (k *ticking) Restore(*kgo.Record) error       { return nil }
func (k *ticking) Process(*kgo.Record, *Out) error { return nil }
func (k *ticking) Commit()                         { k.note("commit") }
func (k *ticking) Abort()                          { k.note("abort") }
func (k *ticking) Revoked()                        { k.note("revoked") }

func (k *ticking) Tick(out *Out) {
	k.ticks++
	k.note("tick")
	out.Emit(&kgo.Record{Topic: "out", Partition: k.p, Value: []byte(fmt.Sprint("round ", k.ticks))})
}

func (k *ticking) note(what string) { *k.events = append(*k.events, fmt.Sprintf("%d:%s", k.p, what)) }

// TestATransactionWithNoInputWhosePartitionIsLostIsAborted: a transaction
// without input (timers only, or a sink's results round) is ended by the
// runtime itself, not by the group session, which would abort a
// transaction whose partitions were revoked or lost meanwhile (a session
// timeout during a sink's long provider calls). The runtime must make that
// check itself: committing would write the outputs of a partition another
// instance may already have restored and be writing.
func TestATransactionWithNoInputWhosePartitionIsLostIsAborted(t *testing.T) {
	t.Run("a transaction with no input whose partition is lost after its tasks ran is aborted, and its tasks are told", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		cfg := minimalConfig()
		cfg.Brokers = c.ListenAddrs()
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The session of a member that has not joined its group (it
		// consumes a topic that does not exist): the test, not a
		// rebalance, decides when a partition is lost.
		sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("tx"),
			kgo.ConsumerGroup("g"), kgo.ConsumeTopics("absent"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sess.Close)
		r.sess = sess
		var events []string
		r.tasks = map[int32]Task{0: &ticking{p: 0, events: &events}, 1: &ticking{p: 1, events: &events}}

		// Partition 1 is lost while the transaction's outputs are being
		// produced: after the tasks ran, before the transaction ends.
		var lost atomic.Bool
		c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			if lost.CompareAndSwap(false, true) {
				r.revoked(context.Background(), nil, map[string][]int32{"in": {1}})
				c.DropControl()
			}
			return nil, nil, false
		})

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		committed, wait, err := r.transact(ctx, nil)
		if err != nil || wait != 0 || committed {
			t.Fatalf("the transaction after the loss: committed %v, backoff %v, err %v; want aborted at once", committed, wait, err)
		}
		if !lost.Load() {
			t.Fatal("the partition was not lost: the transaction produced nothing")
		}
		slices.Sort(events)
		if want := []string{"0:abort", "0:tick", "1:revoked", "1:tick"}; !slices.Equal(events, want) {
			t.Fatalf("the tasks were told %v, want %v (the remaining task aborted, the lost one revoked, neither committed)", events, want)
		}
		if _, ok := r.tasks[1]; ok || len(r.tasks) != 1 {
			t.Fatalf("tasks %v after losing partition 1", r.tasks)
		}

		events = events[:0]
		committed, _, err = r.transact(ctx, nil)
		if err != nil || !committed || !slices.Equal(events, []string{"0:tick", "0:commit"}) {
			t.Fatalf("the next transaction: committed %v, err %v, tasks told %v; want partition 0's tick committed", committed, err, events)
		}

		// A read_committed reader sees the second transaction's output
		// only: nothing of the aborted one, on either partition.
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("out"),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var got []string
		for len(got) == 0 && ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
				got = append(got, fmt.Sprintf("%d:%s", rec.Partition, rec.Value))
			})
		}
		if want := []string{"0:round 2"}; !slices.Equal(got, want) {
			t.Fatalf("a read_committed reader saw %v first, want %v", got, want)
		}
	})
}
