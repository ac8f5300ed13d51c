package stage_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
)

// failingOnce is a counter whose Process fails once, on the second record
// it sees across all sessions, after the first record's outputs are
// already pending in the same batch.
type failingOnce struct {
	*counter
	seen *atomic.Int32
	err  error
}

func (f *failingOnce) Process(r *kgo.Record, out *stage.Out) error {
	if f.seen.Add(1) == 2 {
		return f.err
	}
	return f.counter.Process(r, out)
}

// TestATaskErrorStopsTheStageUnlessItIsTransient: a task's error stops
// Run, except one marked stage.Transient (the route stage's side table out
// of reach during a broker outage), which restarts the session: what the
// batch had pending is dropped, the task is restored from the changelog
// and the record processed again, so every output is committed once.
func TestATaskErrorStopsTheStageUnlessItIsTransient(t *testing.T) {
	unreachable := errors.New("list end offsets: connection refused")
	for _, tc := range []struct {
		name      string
		err       error
		stops     bool
		restarts  int64
		committed []string
	}{
		{
			name: "a transient error restarts the session and commits every output once",
			err:  stage.Transient(unreachable), restarts: 1,
			committed: []string{"a=1", "b=1", "a=2"},
		},
		{
			name: "any other error stops Run and is returned",
			err:  unreachable, stops: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			brokers, opts := c.ListenAddrs(), embedded.ClientOpts()
			ctx := context.Background()
			adm := kadm.NewClient(testenv.Client(t, brokers, opts...))
			in, out, changelog := sanitize("in-"+t.Name()), sanitize("out-"+t.Name()), sanitize("log-"+t.Name())
			for _, name := range []string{in, out, changelog} {
				if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
					t.Fatal(err)
				}
			}
			prod := testenv.Client(t, brokers, opts...)
			for _, k := range []string{"a", "b", "a"} {
				if err := prod.ProduceSync(ctx, &kgo.Record{Topic: in, Key: []byte(k)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}

			var seen atomic.Int32
			reg := metrics.NewRegistry()
			r, err := stage.New(stage.Config{
				Name: "counter", Brokers: brokers, Group: "g-" + in, TransactionalID: "tx-" + in,
				Input: in, Changelogs: []string{changelog}, Partitioner: manualFor{changelog},
				NewTask: func(p int32) stage.Task {
					return &failingOnce{
						counter: &counter{p: p, out: out, changelog: changelog, counts: map[string]int{}, pending: map[string]int{}},
						seen:    &seen, err: tc.err,
					}
				},
				SessionTimeout: 6 * time.Second, ClientOpts: opts, Metrics: reg,
			})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()

			if tc.stops {
				select {
				case runErr := <-done:
					if !errors.Is(runErr, unreachable) {
						t.Fatalf("Run returned %v, want the task's error", runErr)
					}
				case <-time.After(time.Minute):
					t.Fatal("Run did not stop on the task's error")
				}
				if got := testenv.ReadCommitted(t, brokers, out, opts...); len(got) != 0 {
					t.Fatalf("%d outputs committed by a stage that stopped on its first batch, want none", len(got))
				}
				return
			}

			deadline := time.Now().Add(time.Minute)
			var runErr error
			stopped := false
			for !stopped && len(testenv.ReadCommitted(t, brokers, out, opts...)) < len(tc.committed) && time.Now().Before(deadline) {
				select {
				case runErr = <-done:
					stopped = true
				case <-time.After(200 * time.Millisecond):
				}
			}
			cancel()
			if !stopped {
				runErr = <-done
			}
			if runErr != nil {
				t.Fatalf("Run returned %v after a transient task error; want it to carry on and return nil when stopped", runErr)
			}
			var got []string
			for _, rec := range testenv.ReadCommitted(t, brokers, out, opts...) {
				got = append(got, string(rec.Value))
			}
			if len(got) != len(tc.committed) {
				t.Fatalf("committed outputs %v, want %v", got, tc.committed)
			}
			for i := range got {
				if got[i] != tc.committed[i] {
					t.Fatalf("committed outputs %v, want %v", got, tc.committed)
				}
			}
			if n := reg.Counter("herald_stage_session_restarts_total", "", "stage", "counter").Value(); n != tc.restarts {
				t.Fatalf("herald_stage_session_restarts_total = %d, want %d", n, tc.restarts)
			}
		})
	}
}
