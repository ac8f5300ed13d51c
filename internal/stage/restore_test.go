package stage_test

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
)

// restoreLog records what Restore is given, in order.
type restoreLog struct{ got []string }

func (l *restoreLog) Restore(r *kgo.Record) error {
	v := "<tombstone>"
	if r.Value != nil {
		v = string(r.Value)
	}
	l.got = append(l.got, r.Topic[len(r.Topic)-1:]+":"+string(r.Key)+"="+v)
	return nil
}
func (l *restoreLog) Process(*kgo.Record, *stage.Out) error { return nil }
func (l *restoreLog) Tick(*stage.Out)                       {}
func (l *restoreLog) Commit()                               {}
func (l *restoreLog) Abort()                                {}

func TestRestorePartitionReadsOnlyCommittedRecordsOfItsPartition(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		ctx := testenv.Guarded(t)
		adm := kadm.NewClient(testenv.Client(t, brokers, opts...))
		a, b, empty := sanitize("rs-a-"+t.Name())+"-a", sanitize("rs-b-"+t.Name())+"-b", sanitize("rs-e-"+t.Name())+"-e"
		for _, name := range []string{a, b, empty} {
			if _, err := adm.CreateTopic(ctx, 2, 1, nil, name); err != nil {
				t.Fatal(err)
			}
		}
		tx := testenv.Client(t, brokers, append([]kgo.Opt{kgo.TransactionalID("tx-" + a), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
		transact := func(end kgo.TransactionEndTry, recs ...*kgo.Record) {
			t.Helper()
			if err := tx.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if err := tx.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.EndTransaction(ctx, end); err != nil {
				t.Fatal(err)
			}
		}
		rec := func(topic string, p int32, k, v string) *kgo.Record {
			r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(k)}
			if v != "" {
				r.Value = []byte(v)
			}
			return r
		}
		transact(kgo.TryCommit, rec(a, 1, "k1", "1"), rec(a, 0, "other", "x"), rec(b, 1, "k2", "2"))
		transact(kgo.TryAbort, rec(a, 1, "k1", "aborted"), rec(b, 1, "k3", "aborted"))
		transact(kgo.TryCommit, rec(a, 1, "k1", ""), rec(b, 1, "k2", "22"))

		// A transaction still open when the restore starts is waited for.
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := tx.ProduceSync(ctx, rec(a, 1, "k4", "4")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		type result struct {
			n   int64
			got []string
			err error
		}
		done := make(chan result, 1)
		go func() {
			var l restoreLog
			cl := testenv.Client(t, brokers, opts...)
			n, err := stage.RestorePartition(ctx, cl, []string{a, b, empty}, 1, &l, opts...)
			done <- result{n, l.got, err}
		}()
		time.Sleep(300 * time.Millisecond) // let the restore find the transaction open
		if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		var res result
		select {
		case res = <-done:
		case <-time.After(testenv.Guard()):
			t.Fatal("restore did not return")
		}
		if res.err != nil {
			t.Fatal(res.err)
		}
		// Per topic in log order; topics are restored in turn or together,
		// so compare each topic's sequence.
		var gotA, gotB []string
		for _, g := range res.got {
			if g[0] == 'a' {
				gotA = append(gotA, g)
			} else {
				gotB = append(gotB, g)
			}
		}
		wantA := []string{"a:k1=1", "a:k1=<tombstone>", "a:k4=4"}
		wantB := []string{"b:k2=2", "b:k2=22"}
		if !slices.Equal(gotA, wantA) || !slices.Equal(gotB, wantB) || res.n != 5 {
			t.Fatalf("restored %d records: %v and %v; want %v and %v (committed, partition 1 only, tombstones included, the open transaction once it committed)",
				res.n, gotA, gotB, wantA, wantB)
		}
	})
}

func TestRestorePartitionOfEmptyChangelogsRestoresNothing(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		ctx := testenv.Guarded(t)
		adm := kadm.NewClient(testenv.Client(t, brokers, opts...))
		topic := sanitize("rs-empty-" + t.Name())
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		var l restoreLog
		n, err := stage.RestorePartition(ctx, testenv.Client(t, brokers, opts...), []string{topic}, 0, &l, opts...)
		if err != nil || n != 0 || len(l.got) != 0 {
			t.Fatalf("restored %d (%v), %v; want nothing", n, l.got, err)
		}
	})
}
