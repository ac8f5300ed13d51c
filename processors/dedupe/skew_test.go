package dedupe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

func TestAFutureStampedRequestCutsOtherWindowsShortOnlyBeyondTheAllowance(t *testing.T) {
	const window, allowance = time.Minute, 5 * time.Minute
	cases := []struct {
		name      string
		allowance time.Duration
		ahead     time.Duration // the future request's stamp, after the window's end
		want      string        // the honest repeat's outcome
	}{
		{"within the allowance the honest repeat is still a duplicate", allowance, allowance - time.Millisecond, schemas.DecisionDuplicate},
		{"at the allowance past the window's end the key is expired", allowance, allowance, schemas.DecisionAccepted},
		{"without an allowance a record stamped at the window's end expires the key", 0, 0, schemas.DecisionAccepted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Policy{DefaultWindowMs: window.Milliseconds(), IdempotencyTTLMs: window.Milliseconds(), SkewAllowanceMs: c.allowance.Milliseconds()}
			key := req("first", "k1", "")
			repeat := key
			repeat.Title = "repeat"
			outcomes, _, _ := runTask(t, p, []sent{
				{key, 0},
				{req("from a fast clock", "k2", ""), window + c.ahead},
				{repeat, time.Second},
			})
			if outcomes[2] != c.want {
				t.Fatalf("outcomes %v: the honest repeat 1 s after the first was %s, want %s", outcomes, outcomes[2], c.want)
			}
		})
	}
}

func TestAFutureStampedRequestOnTheRealBrokerCutsNoWindowShortAndReplays(t *testing.T) {
	const window, allowance = time.Minute, 10 * time.Minute
	brokers := testenv.Kafka(t)
	cat := testenv.CatalogWith(t, brokers, topics.Options{Partitions: 1, MaxFutureTimestampMs: allowance.Milliseconds()})
	p := Policy{DefaultWindowMs: window.Milliseconds(), IdempotencyTTLMs: window.Milliseconds(), SkewAllowanceMs: allowance.Milliseconds()}
	runStage(t, brokers, cat, "i1", p)

	t0 := time.Now().Truncate(time.Millisecond)
	first := req("first", "k1", "")
	repeat := first
	repeat.Title, repeat.RequestID = "repeat", identity.NewRandomID()
	fast := req("from a fast clock", "k2", "")
	reqs := []schemas.Request{first, fast, repeat}
	// The fast clock is window+allowance/2 ahead: past k1's window, within
	// what the broker accepts.
	times := []time.Time{t0, t0.Add(window + allowance/2), t0.Add(time.Second)}
	produceRequests(t, brokers, cat, reqs, func(i int) time.Time { return times[i] })

	t.Run("the broker refuses a request stamped beyond the allowance", func(t *testing.T) {
		cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
		r := req("from a broken clock", "k3", "")
		b, err := schemas.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		err = cl.ProduceSync(context.Background(), &kgo.Record{Topic: cat.Name(topics.Requests), Key: []byte(r.NotificationID),
			Value: b, Timestamp: time.Now().Add(2 * allowance)}).FirstErr()
		if !errors.Is(err, kerr.InvalidTimestamp) {
			t.Fatalf("produce a request stamped 2×allowance ahead: %v, want INVALID_TIMESTAMP", err)
		}
	})

	decided := map[string]string{}
	for _, d := range waitDecisions(t, brokers, cat, len(reqs), time.Minute) {
		decided[d.RequestID] = d.Outcome
	}
	t.Run("the honest repeat inside its window is a duplicate", func(t *testing.T) {
		want := []string{schemas.DecisionAccepted, schemas.DecisionAccepted, schemas.DecisionDuplicate}
		for i, r := range reqs {
			if decided[r.RequestID] != want[i] {
				t.Errorf("%s: %s, want %s", r.Title, decided[r.RequestID], want[i])
			}
		}
	})
	t.Run("replaying the requests topic through the task reproduces every decision", func(t *testing.T) {
		task := NewTask(p, testTopics, 0)
		var replayed int
		for _, rec := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Requests)) {
			var out stage.Out
			if err := task.Process(rec, &out); err != nil {
				t.Fatal(err)
			}
			task.Commit()
			for _, o := range outRecords(&out) {
				if o.Topic != testTopics.Decisions {
					continue
				}
				var d schemas.Decision
				if err := schemas.Decode(o.Value, &d); err != nil {
					t.Fatal(err)
				}
				replayed++
				if d.Outcome != decided[d.RequestID] {
					t.Errorf("request %s: replay decides %s, the stage decided %s", d.RequestID, d.Outcome, decided[d.RequestID])
				}
			}
		}
		if replayed != len(reqs) {
			t.Fatalf("replay made %d decisions, want %d", replayed, len(reqs))
		}
	})
}
