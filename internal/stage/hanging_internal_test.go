package stage

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestAPartitionIsStuckOnceItsLastStableOffsetStandsBelowTheHighWatermarkLongerThanTheLimit(t *testing.T) {
	tp := topicPartition{"herald.seen", 3}
	t0 := time.UnixMilli(1_800_000_000_000)
	cases := []struct {
		name     string
		readings [][2]int64 // one per second from t0
		stuck    bool
	}{
		{"standing at the same offset below the high watermark past the limit is stuck", [][2]int64{{5, 9}, {5, 9}, {5, 12}}, true},
		{"standing there exactly the limit is not yet", [][2]int64{{5, 9}, {5, 9}}, false},
		{"a last stable offset that moves starts again", [][2]int64{{5, 9}, {6, 9}, {6, 9}}, false},
		{"one that reached the high watermark is forgotten", [][2]int64{{5, 9}, {9, 9}, {5, 9}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s stuckTracker
			var got []stuckPartition
			for i, o := range tc.readings {
				got = s.observe(map[topicPartition][2]int64{tp: o}, t0.Add(time.Duration(i)*time.Second), time.Second)
			}
			if (len(got) == 1) != tc.stuck {
				t.Fatalf("stuck %v, want stuck %v", got, tc.stuck)
			}
		})
	}
	t.Run("a partition missing from a reading is forgotten", func(t *testing.T) {
		var s stuckTracker
		s.observe(map[topicPartition][2]int64{tp: {5, 9}}, t0, time.Second)
		s.observe(map[topicPartition][2]int64{}, t0.Add(time.Second), time.Second)
		if got := s.observe(map[topicPartition][2]int64{tp: {5, 9}}, t0.Add(3*time.Second), time.Second); len(got) != 0 {
			t.Fatalf("stuck %v after the partition was gone from a reading", got)
		}
	})
}

// TestAnAbandonedTransactionOnAnOutputIsAReadinessWarningAndAGauge: a
// producer that begins a transaction on a topic the stage writes and is
// abandoned holds its last stable offset; readings of the broker more than
// TransactionTimeout apart make it a warning and the gauge 1; once the
// transaction is aborted both clear.
func TestAnAbandonedTransactionOnAnOutputIsAReadinessWarningAndAGauge(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := minimalConfig()
	cfg.Brokers, cfg.Outputs, cfg.TransactionTimeout = c.ListenAddrs(), []string{"out"}, time.Second
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("abandoned"), kgo.TransactionTimeout(time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Topic: "out", Partition: 1, Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	read := func() map[topicPartition][2]int64 {
		t.Helper()
		reading, err := readStable(ctx, kadm.NewClient(admin), r.writtenTopics())
		if err != nil {
			t.Fatal(err)
		}
		return reading
	}
	t0 := time.Now()
	r.noteHanging(read(), t0)
	if w := r.Warnings(); len(w) != 0 || r.hangingParts.Value() != 0 {
		t.Fatalf("warnings %v, gauge %d at the first reading", w, r.hangingParts.Value())
	}
	r.noteHanging(read(), t0.Add(2*time.Second))
	w := r.Warnings()
	if len(w) != 1 || !strings.HasPrefix(w[0], "out/1: last stable offset stuck at 0 below 1 for 2s, longer than the transaction timeout 1s") || r.hangingParts.Value() != 1 {
		t.Fatalf("warnings %q, gauge %d; want out/1 stuck and the gauge 1", w, r.hangingParts.Value())
	}
	if err := p.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		r.noteHanging(read(), t0.Add(3*time.Second))
		if len(r.Warnings()) == 0 && r.hangingParts.Value() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still warning %v after the abort", r.Warnings())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
