package stage_test

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
	// beforeFail, when set, runs before the error is returned.
	beforeFail func()
}

func (f *failingOnce) Process(r *kgo.Record, out *stage.Out) error {
	if f.seen.Add(1) == 2 {
		if f.beforeFail != nil {
			f.beforeFail()
		}
		return f.err
	}
	return f.counter.Process(r, out)
}

// TestATaskErrorStopsTheStageUnlessItIsTransient: a task's error stops
// Run, except one marked stage.Transient (the route stage's side table out
// of reach during a broker outage), which restarts the session: what the
// batch had pending is dropped, the task is restored from the changelog
// and the record processed again, so every output is committed once. The
// batch's first outputs may already be in its transaction (a transaction
// hands its outputs to the producer while the batch is processed): then
// the transaction is aborted at once, not left open to hold back every
// read_committed reader of the outputs until it times out.
func TestATaskErrorStopsTheStageUnlessItIsTransient(t *testing.T) {
	unreachable := errors.New("list end offsets: connection refused")
	for _, when := range []struct {
		name  string
		chunk int // outputs handed to the producer at a time; 0 keeps the runtime's
	}{
		{name: "while the batch's outputs are only pending"},
		// The counter emits two outputs per record: the first record's
		// two are handed over before the second record fails.
		{name: "after the batch's first outputs went into its transaction", chunk: 2},
	} {
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
				name: "any other error stops Run, is returned and leaves no transaction open",
				err:  unreachable, stops: true,
			},
		} {
			t.Run(tc.name+", "+when.name, func(t *testing.T) {
				if when.chunk > 0 {
					stage.SetProduceChunk(t, when.chunk)
				}
				onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
					r := newRig(t, brokers, opts, 1, nil)
					r.produce(0, "a", "b", "a")
					var seen atomic.Int32
					reg := metrics.NewRegistry()
					cfg := r.config()
					newCounter := cfg.NewTask
					cfg.NewTask = func(p int32) stage.Task {
						f := &failingOnce{counter: newCounter(p).(*counter), seen: &seen, err: tc.err}
						if when.chunk > 0 {
							// The first outputs reach the broker, in the
							// open transaction, before the task fails.
							f.beforeFail = r.awaitUncommittedOutput
						}
						return f
					}
					cfg.Metrics = reg
					failedAbort := newLogWatch("aborting the transaction of a failed batch")
					cfg.Logger = slog.New(failedAbort)
					// The abort succeeds: nothing may say it failed.
					t.Cleanup(func() {
						if lines := failedAbort.logged(); len(lines) > 0 {
							t.Errorf("a failed abort was logged (%v) though the transaction was aborted", lines)
						}
					})
					// Longer than the guard below: a transaction left open
					// would outlast it.
					cfg.TransactionTimeout = testenv.Guard() + time.Minute
					s := r.start(cfg)

					if tc.stops {
						select {
						case runErr := <-s.done:
							if !errors.Is(runErr, unreachable) {
								t.Fatalf("Run returned %v, want the task's error", runErr)
							}
							s.done <- runErr
						case <-time.After(testenv.Guard()):
							t.Fatal("Run did not stop on the task's error")
						}
						r.awaitNoOpenTransaction()
						if got := r.outputs(); len(got) != 0 {
							t.Fatalf("outputs %v committed by a stage that stopped on its first batch, want none", got)
						}
						return
					}
					if got := r.awaitOut(s, len(tc.committed)); !equal(got, tc.committed) {
						t.Fatalf("committed outputs %v, want %v", got, tc.committed)
					}
					if err := s.stop(); err != nil {
						t.Fatalf("Run returned %v after a transient task error; want it to carry on and return nil when stopped", err)
					}
					if n := reg.Counter("herald_stage_session_restarts_total", "", "stage", "counter").Value(); n != tc.restarts {
						t.Fatalf("herald_stage_session_restarts_total = %d, want %d", n, tc.restarts)
					}
				})
			})
		}
	}
}
