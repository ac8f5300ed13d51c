package stage_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
)

func TestTheProducersLingerIsTheConfiguredOne(t *testing.T) {
	for _, tc := range []struct {
		name   string
		linger time.Duration
		want   time.Duration
	}{
		{"an unset linger is the documented default, 5 ms", 0, 5 * time.Millisecond},
		{"a set linger is used as it is", 40 * time.Millisecond, 40 * time.Millisecond},
		{"a negative linger is none", -1, 0},
		{"the longest linger is a minute", time.Minute, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := stage.New(stage.Config{Name: "linger", Brokers: []string{"127.0.0.1:1"}, Group: "g", TransactionalID: "g-0",
				Input: "in", NewTask: func(int32) stage.Task { return nil }, ProducerLinger: tc.linger})
			if err != nil {
				t.Fatal(err)
			}
			if got := stage.ProducerLingerOf(t, r); got != tc.want {
				t.Fatalf("linger %v, want %v", got, tc.want)
			}
		})
	}
}

func TestALingerLongerThanAMinuteIsRefused(t *testing.T) {
	_, err := stage.New(stage.Config{Name: "linger", Brokers: []string{"127.0.0.1:1"}, Group: "g", TransactionalID: "g-0",
		Input: "in", NewTask: func(int32) stage.Task { return nil }, ProducerLinger: time.Minute + time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "ProducerLinger 1m0.001s is longer than a minute") {
		t.Fatalf("error %v, want one naming ProducerLinger", err)
	}
}

// TestATransactionDoesNotWaitForTheProducersLinger holds the runtime to
// what Config.ProducerLinger promises: the linger only gathers outputs
// while a transaction's inputs are processed, and the end of the
// transaction sends what lingers at once. With the longest linger (a
// minute), outputs handed to the producer every 3 of them and 4
// transactions, every output is committed within the test's wait (20 s
// on kfake under -short, 2 minutes on the real broker), which waiting out
// the linger in each transaction would exceed.
func TestATransactionDoesNotWaitForTheProducersLinger(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		stage.SetProduceChunk(t, 3)
		r := newRig(t, brokers, opts, 2, nil)
		const n = 40
		want := r.produceDistinct(n)
		cfg := r.config()
		cfg.ProducerLinger = time.Minute
		cfg.MaxBatchRecords = 10
		s := r.start(cfg)
		if got := r.awaitOut(s, n); !equal(got, want) {
			t.Fatalf("outputs %v, want each key once with count 1", got)
		}
	})
}
