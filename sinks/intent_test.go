package sinks_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/topics"
)

// intentChecker is a provider that, before answering, reads the sink's
// state topic read_committed and notes whether the call's intent (its
// delivery pending at this attempt) is already committed.
type intentChecker struct {
	brokers []string
	topic   string
	mu      sync.Mutex
	seen    map[string]bool // delivery id → intent committed before every call
	errs    []error
}

func (c *intentChecker) Send(ctx context.Context, cmd *schemas.DeliveryCommand) sinks.Result {
	ok, err := c.committedIntent(ctx, cmd.DeliveryID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.errs = append(c.errs, err)
	}
	if prev, called := c.seen[cmd.DeliveryID]; !called || prev {
		c.seen[cmd.DeliveryID] = ok // false once any call came before its intent
	}
	return sinks.Result{Class: sinks.Success, Rule: "accepted", Status: 200}
}

func (c *intentChecker) committedIntent(ctx context.Context, id string) (bool, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumeTopics(c.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return false, err
	}
	defer cl.Close()
	ends, err := stage.LastStableOffsets(ctx, cl, c.topic, 0, 1)
	if err != nil {
		return false, err
	}
	pos := map[int32]int64{}
	found := false
	for {
		done := true
		for p, end := range ends {
			if pos[p] < end {
				done = false
			}
		}
		if done {
			return found, nil
		}
		fetches := cl.PollFetches(ctx)
		if err := fetches.Err0(); err != nil {
			return false, fmt.Errorf("read %s: %w", c.topic, err)
		}
		for _, r := range fetches.Records() {
			pos[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() || string(r.Key) != id {
				continue
			}
			var e schemas.SinkEntry
			if schemas.Decode(r.Value, &e) == nil && e.Status == schemas.SinkPending && e.Attempt == 1 {
				found = true
			}
		}
	}
}

func TestTheIntentIsCommittedBeforeTheProviderIsCalled(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	checker := &intentChecker{brokers: brokers, topic: cat.Name(topics.SinkState("apns")), seen: map[string]bool{}}
	sinktest.Start(t, sinks.Options{Instance: stage.Instance{Brokers: brokers}, Channel: "apns", Provider: checker, Catalog: cat, CallTimeout: 30 * time.Second})
	var ids []string
	var cmds []*schemas.DeliveryCommand
	for i := range 6 {
		c := deliveryCmd(fmt.Sprintf("intent-%d", i), "dev")
		cmds = append(cmds, c)
		ids = append(ids, c.DeliveryID)
	}
	sinktest.Produce(t, brokers, cat, cmds...)
	sinktest.AwaitOutcomes(t, brokers, cat, ids...)
	checker.mu.Lock()
	defer checker.mu.Unlock()
	if len(checker.errs) > 0 {
		t.Fatal(checker.errs)
	}
	for _, id := range ids {
		if seen, called := checker.seen[id]; !called || !seen {
			t.Errorf("delivery %s: called %v, intent committed before the call %v", id, called, seen)
		}
	}
}
