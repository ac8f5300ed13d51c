package stage_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
)

func TestAMinimumTransactionIntervalOutsideItsRangeIsRefused(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, 10*time.Second + time.Millisecond} {
		t.Run(d.String()+" is refused naming MinTransactionInterval", func(t *testing.T) {
			_, err := stage.New(stage.Config{Name: "interval", Brokers: []string{"127.0.0.1:1"}, Group: "g", TransactionalID: "g-0",
				Input: "in", NewTask: func(int32) stage.Task { return nil }, MinTransactionInterval: d})
			if err == nil || !strings.Contains(err.Error(), "MinTransactionInterval "+d.String()+" is not between 0 and 10s") {
				t.Fatalf("error %v, want one naming MinTransactionInterval", err)
			}
		})
	}
}

// TestInputArrivingWithinTheMinimumTransactionIntervalSharesATransaction
// holds the runtime to Config.MinTransactionInterval: after a transaction
// that began less than the interval ago, records that arrive one after
// the other, in separate fetches (a pause between them), are committed in
// one transaction, not one each; and nothing is lost or repeated.
func TestInputArrivingWithinTheMinimumTransactionIntervalSharesATransaction(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newRig(t, brokers, opts, 2, nil)
		cfg := r.config()
		m := metrics.NewRegistry()
		cfg.Metrics = m
		cfg.MinTransactionInterval = 8 * time.Second
		committed := m.Counter("herald_stage_transactions_total", "", "stage", "counter", "result", "committed")
		s := r.start(cfg)
		r.produce(0, "a")
		r.awaitOut(s, 1)
		before := committed.Value()
		r.produce(0, "b")
		time.Sleep(300 * time.Millisecond) // b's fetch returns before c is written
		r.produce(1, "c")
		got := r.awaitOut(s, 3)
		if n := committed.Value() - before; n != 1 {
			t.Fatalf("b and c committed in %d transactions, want 1", n)
		}
		if !sameSet(got, []string{"a=1", "b=1", "c=1"}) {
			t.Fatalf("outputs %v, want a=1, b=1 and c=1 once each", got)
		}
	})
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		if seen[s] == 0 {
			return false
		}
		seen[s]--
	}
	return true
}
