package sinks

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

// redrive runs one step with c redriven from a dead letter that failed at
// attempt failedAt (header HeaderRedrive), as `herald deadletters
// redrive` writes it.
func (h *harness) redrive(c *schemas.DeliveryCommand, failedAt int) {
	h.t.Helper()
	b, err := schemas.Encode(c)
	if err != nil {
		h.t.Fatal(err)
	}
	var out stage.Out
	rec := &kgo.Record{Key: []byte(c.DeliveryID), Value: b, Headers: []kgo.RecordHeader{{Key: HeaderRedrive, Value: []byte(strconv.Itoa(failedAt))}}}
	if err := h.task.Process(rec, &out); err != nil {
		h.t.Fatal(err)
	}
	h.task.Tick(&out)
	h.task.Commit()
	h.out = append(h.out, out.Records()...)
	for h.rt.afterCommit(context.Background()) {
		var more stage.Out
		h.task.Tick(&more)
		h.task.Commit()
		h.out = append(h.out, more.Records()...)
	}
}

// retry advances the clock past any backoff and runs a step.
func (h *harness) retry() {
	h.now = h.now.Add(10 * time.Second)
	h.step()
}

func TestARedriveStartsANewAttemptOnlyWhileTheDeliveryIsFailedWhereItsDeadLetterSays(t *testing.T) {
	policy := Policy{MaxAttempts: 2, Backoff: backoff.Policy{Min: time.Second, Max: 2 * time.Second}, MaxAge: 24 * time.Hour}
	notSent := Result{Class: Retryable, Rule: "not_sent"}
	cases := []struct {
		name string
		// before runs the delivery up to the redrive; failedAt is the
		// attempt the redrive names; then the script and retries after it.
		before   func(h *harness)
		failedAt int
		after    []Result
		retries  int
		attempts []string
		outcomes []string
		calls    int
	}{
		{
			name: "a delivery failed at the attempt named is sent again, numbering on, with a fresh retry budget",
			before: func(h *harness) {
				h.prov.results["d"] = []Result{notSent, notSent}
				h.step(cmd("d"))
				h.retry() // attempt 2: retries exhausted, dead-lettered
			},
			failedAt: 2, after: []Result{notSent}, retries: 1,
			attempts: []string{"d:retryable#1/not_sent", "d:retryable#2/not_sent", "d:retryable#3/not_sent", "d:sent#4/accepted"},
			outcomes: []string{"d:failed", "d:delivered"}, calls: 4,
		},
		{
			name: "a redrive that names an earlier attempt than the failure's is not sent",
			before: func(h *harness) {
				h.prov.results["d"] = []Result{{Class: Permanent, Rule: "bad_topic"}}
				h.step(cmd("d"))
				h.redrive(cmd("d"), 1) // the real redrive: delivered at attempt 2
			},
			failedAt: 1,
			attempts: []string{"d:permanent#1/bad_topic", "d:sent#2/accepted"},
			outcomes: []string{"d:failed", "d:delivered"}, calls: 2,
		},
		{
			name: "a second redrive while the first is still parked is not sent",
			before: func(h *harness) {
				h.prov.results["d"] = []Result{{Class: Permanent, Rule: "bad_topic"}, notSent}
				h.step(cmd("d"))
				h.redrive(cmd("d"), 1) // attempt 2: parked for a retry
			},
			failedAt: 1, retries: 1,
			attempts: []string{"d:permanent#1/bad_topic", "d:retryable#2/not_sent", "d:sent#3/accepted"},
			outcomes: []string{"d:failed", "d:delivered"}, calls: 3,
		},
		{
			name:     "a delivered delivery is not sent again by a redrive",
			before:   func(h *harness) { h.step(cmd("d")) },
			failedAt: 1,
			attempts: []string{"d:sent#1/accepted"}, outcomes: []string{"d:delivered"}, calls: 1,
		},
		{
			name: "a delivery failed again after a redrive is redriven by the new dead letter's attempt",
			before: func(h *harness) {
				h.prov.results["d"] = []Result{{Class: Permanent, Rule: "bad_topic"}, {Class: Permanent, Rule: "bad_topic"}}
				h.step(cmd("d"))
				h.redrive(cmd("d"), 1) // fails again at attempt 2
			},
			failedAt: 2,
			attempts: []string{"d:permanent#1/bad_topic", "d:permanent#2/bad_topic", "d:sent#3/accepted"},
			outcomes: []string{"d:failed", "d:failed", "d:delivered"}, calls: 3,
		},
		{
			name: "a copy of the first redrive, after the delivery failed again, is not sent",
			before: func(h *harness) {
				h.prov.results["d"] = []Result{{Class: Permanent, Rule: "bad_topic"}, {Class: Permanent, Rule: "bad_topic"}}
				h.step(cmd("d"))
				h.redrive(cmd("d"), 1) // fails again at attempt 2
			},
			failedAt: 1,
			attempts: []string{"d:permanent#1/bad_topic", "d:permanent#2/bad_topic"},
			outcomes: []string{"d:failed", "d:failed"}, calls: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, policy)
			tc.before(h)
			h.prov.results["d"] = append(h.prov.results["d"], tc.after...)
			h.redrive(cmd("d"), tc.failedAt)
			for range tc.retries {
				h.retry()
			}
			if got := h.on(h.rt.topics.Attempts); !slices.Equal(got, tc.attempts) {
				t.Errorf("attempts %v, want %v", got, tc.attempts)
			}
			if got := h.on(h.rt.topics.Outcomes); !slices.Equal(got, tc.outcomes) {
				t.Errorf("outcomes %v, want %v", got, tc.outcomes)
			}
			if h.prov.calls["d"] != tc.calls {
				t.Errorf("%d calls, want %d", h.prov.calls["d"], tc.calls)
			}
		})
	}
}
