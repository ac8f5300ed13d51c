package stage_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
)

// TestAFailedCommitRestartsTheSessionAndLosesOrRepeatsNothing fails the
// stage's first commit (kfake answers its EndTxn with an error and commits
// nothing): Run does not return; it starts a new session, which fences the
// transaction left open, restores the task from the changelog and
// processes the input again, so every output is committed exactly once.
// The broker-outage test in cmd/herald shows the same on a real broker.
func TestAFailedCommitRestartsTheSessionAndLosesOrRepeatsNothing(t *testing.T) {
	c := testenv.Kfake(t)
	brokers, opts := c.ListenAddrs(), embedded.ClientOpts()
	ctx := testenv.Guarded(t)
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

	var failed atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.EndTxnRequest)
		if !req.Commit || failed.Load() {
			c.KeepControl()
			return nil, nil, false
		}
		failed.Store(true)
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.InvalidTxnState.Code
		return resp, nil, true
	})

	reg := metrics.NewRegistry()
	r, err := stage.New(stage.Config{
		Name: "counter", Brokers: brokers, Group: "g-" + in, TransactionalID: "tx-" + in,
		Input: in, Changelogs: []string{changelog}, Partitioner: manualFor{changelog},
		NewTask: func(p int32) stage.Task {
			return &counter{p: p, out: out, changelog: changelog, counts: map[string]int{}, pending: map[string]int{}}
		},
		SessionTimeout: 6 * time.Second, ClientOpts: opts, Metrics: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErr error
	wg.Add(1)
	go func() { defer wg.Done(); runErr = r.Run(rctx) }()
	deadline := time.Now().Add(time.Minute)
	for len(testenv.ReadCommitted(t, brokers, out, opts...)) < 3 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	wg.Wait()

	if runErr != nil {
		t.Fatalf("Run returned %v after a failed commit; want it to carry on and return nil when stopped", runErr)
	}
	if !failed.Load() {
		t.Fatal("no commit was failed: the test did not test anything")
	}
	var got []string
	for _, rec := range testenv.ReadCommitted(t, brokers, out, opts...) {
		got = append(got, string(rec.Value))
	}
	if want := []string{"a=1", "b=1", "a=2"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("committed outputs %v, want %v", got, want)
	}
	if n := reg.Counter("herald_stage_session_restarts_total", "", "stage", "counter").Value(); n != 1 {
		t.Fatalf("herald_stage_session_restarts_total = %d, want 1", n)
	}
}
