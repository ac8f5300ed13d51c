package sinks

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// writer is a Writer that writes one record per command, or fails.
type writer struct {
	fail  error
	sends int
}

func (w *writer) Records(cmd *schemas.DeliveryCommand, _ time.Time) ([]*kgo.Record, error) {
	if w.fail != nil {
		return nil, w.fail
	}
	return []*kgo.Record{{Topic: "feed", Key: []byte(cmd.NotificationID)}}, nil
}

func (w *writer) Send(context.Context, *schemas.DeliveryCommand) Result {
	w.sends++
	return Result{Class: Success}
}

func TestAWriterChannelWritesInTheTransactionThatConsumesTheCommand(t *testing.T) {
	cases := []struct {
		name                                  string
		fail                                  error
		feed, attempts, outcomes, deadletters []string
	}{
		{name: "its records, the attempt, the outcome and the final state commit with the input, once however often the command repeats",
			feed: []string{"n-d"}, attempts: []string{"d:sent#1/written"}, outcomes: []string{"d:delivered"}},
		{name: "a command it cannot write fails and is dead-lettered", fail: errors.New("no tenant"),
			attempts: []string{"d:permanent#1/unwritable"}, outcomes: []string{"d:failed"}, deadletters: []string{"d"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Policy{})
			w := &writer{fail: tc.fail}
			h.rt = newRuntime(Options{
				Instance:    stage.Instance{Logger: testLogger(t), Metrics: metrics.NewRegistry()},
				Channel:     "feed",
				Provider:    w,
				Catalog:     topics.New(topics.Options{}),
				Policy:      h.rt.policy,
				MaxInFlight: 4,
				CallTimeout: time.Second,
				Now:         func() time.Time { return h.now },
			})
			h.task = h.rt.newTask(testPartition)
			h.step(cmd("d"), cmd("d"))
			h.step(cmd("d"))
			var feed []string
			for _, r := range h.out {
				if r.Topic == "feed" {
					feed = append(feed, string(r.Key))
				}
			}
			tp := TopicsOf(topics.New(topics.Options{}), "feed")
			for _, c := range []struct {
				what      string
				got, want []string
			}{
				{"feed", feed, tc.feed}, {"attempts", h.on(tp.Attempts), tc.attempts},
				{"outcomes", h.on(tp.Outcomes), tc.outcomes}, {"dead letters", h.on(tp.DeadLetters), tc.deadletters},
			} {
				if !slices.Equal(c.got, c.want) {
					t.Fatalf("%s %v, want %v", c.what, c.got, c.want)
				}
			}
			if w.sends != 0 {
				t.Fatalf("Send was called %d times for a Writer", w.sends)
			}
		})
	}
}
