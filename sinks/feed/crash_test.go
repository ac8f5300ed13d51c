package feed_test

import (
	"fmt"
	"testing"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/topics"
)

// TestEachFeedItemExactlyOnceThroughSIGKILLs: two `herald sink --channel
// feed` processes over 2,000 deliveries (and 200 repeats), SIGKILLed at
// random. The feed has no provider call, so nothing is ambiguous: every
// delivery has exactly one committed feed item, one delivered outcome and
// one attempt.
func TestEachFeedItemExactlyOnceThroughSIGKILLs(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 4)
	cmds := make([]*schemas.DeliveryCommand, 2000)
	for i := range cmds {
		cmds[i] = feedCmd(fmt.Sprint("u", i%300), fmt.Sprint("n", i))
	}
	a := sinktest.Crash{Channel: "feed", Commands: cmds, Repeats: 200, Kills: 8}.Run(t, brokers, cat)

	items := map[string]int{}
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Feed)) {
		items[string(r.Key)]++
	}
	arrivals := map[string]int{}
	for _, c := range cmds {
		arrivals[c.DeliveryID] = items[schemas.FeedKey(c.Tenant, c.Recipient, c.NotificationID)]
		if n := arrivals[c.DeliveryID]; n != 1 {
			t.Errorf("%s: %d committed feed items, want exactly 1", c.DeliveryID, n)
		}
		if n := len(a.Attempts[c.DeliveryID]); n != 1 {
			t.Errorf("%s: %d attempts, want 1", c.DeliveryID, n)
		}
	}
	sinktest.CheckOnce(t, a, cmds, arrivals)
}
