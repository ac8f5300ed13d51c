package stage_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
)

// poisoned is a counter whose first Process also emits a record the
// producer refuses (larger than any batch), so the first transaction that
// holds it aborts after the task has already changed its pending state.
type poisoned struct {
	*counter
	poison *atomic.Bool
}

func (p *poisoned) Process(r *kgo.Record, out *stage.Out) error {
	if err := p.counter.Process(r, out); err != nil {
		return err
	}
	if p.poison.CompareAndSwap(true, false) {
		out.Emit(&kgo.Record{Topic: p.out, Key: []byte("poison"), Value: bytes.Repeat([]byte("x"), 2<<20)})
	}
	return nil
}

func TestAnAbortedTransactionInARunningStageLeavesNoStateBehind(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		ctx := testenv.Guarded(t)
		adm := kadm.NewClient(testenv.Client(t, brokers, opts...))
		in, out, changelog := sanitize("in-"+t.Name()), sanitize("out-"+t.Name()), sanitize("log-"+t.Name())
		for _, name := range []string{in, out, changelog} {
			if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
				t.Fatal(err)
			}
		}
		var poison atomic.Bool
		poison.Store(true)
		m := metrics.NewRegistry()
		r, err := stage.New(stage.Config{
			Name: "poisoned", Brokers: brokers, Group: "g-" + in, TransactionalID: "tx-" + in,
			Input: in, Changelogs: []string{changelog}, Partitioner: manualFor{changelog},
			NewTask: func(p int32) stage.Task {
				c := &counter{p: p, out: out, changelog: changelog, counts: map[string]int{}, pending: map[string]int{}}
				return &poisoned{counter: c, poison: &poison}
			},
			SessionTimeout: 6 * time.Second, ClientOpts: opts, Metrics: m,
		})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); r.Run(rctx) }()
		defer func() { cancel(); wg.Wait() }()

		cl := testenv.Client(t, brokers, opts...)
		produce := func(keys ...string) {
			for _, k := range keys {
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Key: []byte(k)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		wait := func(n int) []string {
			deadline := time.Now().Add(testenv.Guard())
			for {
				var got []string
				for _, rec := range testenv.ReadCommitted(t, brokers, out, opts...) {
					got = append(got, string(rec.Value))
				}
				if len(got) >= n || time.Now().After(deadline) {
					slices.Sort(got)
					return got
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		produce("a", "b")
		first := wait(2)
		if m.Counter("herald_stage_transactions_total", "", "stage", "poisoned", "result", "aborted").Value() == 0 {
			t.Fatal("no transaction aborted: the poison record was accepted")
		}
		// The aborted attempt counted a (and b, if in the same batch); the
		// replay after the abort must count from the committed state.
		if fmt.Sprint(first) != "[a=1 b=1]" {
			t.Fatalf("committed outputs after an abort %v, want [a=1 b=1]", first)
		}
		produce("a")
		if got := wait(3); fmt.Sprint(got) != "[a=1 a=2 b=1]" {
			t.Fatalf("committed outputs %v, want [a=1 a=2 b=1]", got)
		}
		var log []string
		for _, rec := range testenv.ReadCommitted(t, brokers, changelog, opts...) {
			log = append(log, string(rec.Key)+"="+string(rec.Value))
		}
		slices.Sort(log)
		if fmt.Sprint(log) != "[a=1 a=2 b=1]" {
			t.Fatalf("committed changelog %v, want [a=1 a=2 b=1]", log)
		}
	})
}

// TestLastStableOffsetsStopBeforeAnOpenTransaction: a read_committed reader
// must not wait for, and a restore must not count, records of a
// transaction that is still open.
func TestLastStableOffsetsStopBeforeAnOpenTransaction(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		ctx := testenv.Guarded(t)
		adm := kadm.NewClient(testenv.Client(t, brokers, opts...))
		topic := sanitize("lso-" + t.Name())
		if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		plain := testenv.Client(t, brokers, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
		for i := range 3 {
			if err := plain.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		tx := testenv.Client(t, brokers, append([]kgo.Opt{kgo.TransactionalID("tx-" + topic), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, p := range []int32{0, 1} {
			if err := tx.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("open")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		ends, err := stage.LastStableOffsets(ctx, plain, topic, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if ends[0] != 3 || ends[1] != 0 {
			t.Fatalf("with a transaction open: last stable offsets %v, want 0:3 1:0 (below the open transaction)", ends)
		}
		if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		// Committed: each partition holds its record and the commit marker.
		// Kafka writes the markers after EndTxn returns, each partition
		// on its own: wait for them (a guard, not a timed assertion).
		for deadline := time.Now().Add(testenv.Guard()); ; time.Sleep(20 * time.Millisecond) {
			if ends, err = stage.LastStableOffsets(ctx, plain, topic, 0, 1); err != nil {
				t.Fatal(err)
			}
			if ends[0] == 5 && ends[1] == 2 || time.Now().After(deadline) {
				break
			}
		}
		if ends[0] != 5 || ends[1] != 2 {
			t.Fatalf("after the commit: last stable offsets %v, want 0:5 1:2", ends)
		}
	})
}
