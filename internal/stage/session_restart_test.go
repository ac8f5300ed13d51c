package stage_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/testenv"
)

// These tests fail a stage's session on kfake (the fencing of its
// predecessor, a commit) and check what Run does: start a new session
// after a backoff that grows with consecutive failures and starts over
// after a session that made progress, or stop on a broker's denial.

// kfakeRig is a counter stage's rig on a kfake cluster of its own, whose
// requests the test can answer.
func kfakeRig(t *testing.T) (*kfake.Cluster, *rig) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close) // after the clients, which close in later-registered cleanups
	opts := append(embedded.ClientOpts(), kgo.FetchMaxWait(100*time.Millisecond))
	return c, newRig(t, c.ListenAddrs(), opts, 1, nil)
}

// failInitProducerID answers the first n InitProducerID requests of
// transactional id txnID with code, and counts every one of them.
func failInitProducerID(c *kfake.Cluster, txnID string, n int, code *kerr.Error) *atomic.Int32 {
	var seen atomic.Int32
	c.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.InitProducerIDRequest)
		if req.TransactionalID == nil || *req.TransactionalID != txnID {
			return nil, nil, false
		}
		if int(seen.Add(1)) > n {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = code.Code
		return resp, nil, true
	})
	return &seen
}

// sessionFailures collects the "failures" count of each session restart
// the stage logs.
type sessionFailures struct {
	mu  sync.Mutex
	got []int64
}

const restartMsg = "stage session failed; starting a new one after a backoff (its partitions are restored again)"

func (s *sessionFailures) Enabled(context.Context, slog.Level) bool { return true }
func (s *sessionFailures) Handle(_ context.Context, r slog.Record) error {
	if r.Message != restartMsg {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "failures" {
			s.mu.Lock()
			s.got = append(s.got, a.Value.Int64())
			s.mu.Unlock()
		}
		return true
	})
	return nil
}
func (s *sessionFailures) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *sessionFailures) WithGroup(string) slog.Handler      { return s }
func (s *sessionFailures) counts() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func TestFailedSessionsRestartWithABackoffThatStartsOverAfterProgress(t *testing.T) {
	c, r := kfakeRig(t)
	r.produce(0, "a")
	// The first session cannot fence its predecessor; the second fails
	// its first commit (a's), so it made no progress either; the third
	// commits a's output, then fails its next commit (b's); the fourth
	// processes b again.
	fenced := failInitProducerID(c, r.txnID, 1, kerr.UnknownServerError)
	var commits atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.EndTxnRequest)
		if !req.Commit {
			return nil, nil, false
		}
		if n := commits.Add(1); n != 1 && n != 3 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.InvalidTxnState.Code
		return resp, nil, true
	})

	cfg := r.config()
	var log sessionFailures
	reg := metrics.NewRegistry()
	cfg.Logger, cfg.Metrics = slog.New(&log), reg
	cfg.Backoff = backoff.Policy{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	s := r.start(cfg)
	if got := r.awaitOut(s, 1); !slices.Equal(got, []string{"a=1"}) {
		t.Fatalf("outputs %v after the failed fencings, want a=1", got)
	}
	r.produce(0, "b")
	if got := r.awaitOut(s, 2); !slices.Equal(got, []string{"a=1", "b=1"}) {
		t.Fatalf("outputs %v after the failed commit, want a=1 b=1", got)
	}
	for deadline := time.Now().Add(testenv.Guard()); s.Restoring() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("Run returned %v, want nil when stopped after its sessions failed", err)
	}

	if n := fenced.Load(); n < 2 {
		t.Fatalf("%d fencing requests, want the failed one and more", n)
	}
	if n := commits.Load(); n != 4 {
		t.Fatalf("%d commits, want 4: a's failed, a's, b's failed, b's", n)
	}
	// Two failures in a row, without a commit between them, back off
	// longer each time; the session that committed a's output resets the
	// count, so its failure is a first one again.
	if got, want := log.counts(), []int64{1, 2, 1}; !slices.Equal(got, want) {
		t.Fatalf("session restarts logged failures %v, want %v", got, want)
	}
	if n := reg.Counter("herald_stage_session_restarts_total", "", "stage", "counter").Value(); n != 3 {
		t.Fatalf("herald_stage_session_restarts_total = %d, want 3", n)
	}
	// Every partition restored, in every session, is counted out again.
	if n := reg.Gauge("herald_stage_restoring_partitions", "", "stage", "counter").Value(); n != 0 {
		t.Fatalf("herald_stage_restoring_partitions = %d once the restores ended, want 0", n)
	}
}

func TestABrokersDenialWhileFencingStopsTheStageWithTheError(t *testing.T) {
	c, r := kfakeRig(t)
	r.produce(0, "a")
	failInitProducerID(c, r.txnID, 1, kerr.TransactionalIDAuthorizationFailed)
	cfg := r.config()
	var log sessionFailures
	cfg.Logger = slog.New(&log)
	s := r.start(cfg)
	var err error
	select {
	case err = <-s.done:
		s.done <- err
	case <-time.After(testenv.Guard()):
		t.Fatal("Run did not return after the broker denied the transactional id")
	}
	if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("Run returned %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
	}
	if got := log.counts(); len(got) != 0 {
		t.Fatalf("sessions restarted (failures %v) after a denial, want none", got)
	}
	if got := r.outputs(); len(got) != 0 {
		t.Fatalf("outputs %v from a denied stage", got)
	}
}
