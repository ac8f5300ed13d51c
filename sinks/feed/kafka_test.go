package feed_test

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/feed"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/topics"
)

func feedCmd(recipient, note string) *schemas.DeliveryCommand {
	nid := identity.DedupeID("acme", "t", recipient, note)
	return &schemas.DeliveryCommand{DeliveryID: identity.DeliveryID(nid, "feed"), NotificationID: nid, Tenant: "acme", Type: "t",
		Recipient: recipient, DeviceID: "feed", Channel: feed.Channel, CollapseID: nid, Title: note, Body: "b",
		CreatedAt: time.Now().UnixMilli(), ExpiresAt: time.Now().Add(time.Hour).UnixMilli()}
}

func TestTheFeedSinkWritesOneItemPerDeliveryExactlyOnceOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	a, b := feedCmd("u1", "hello"), feedCmd("u2", "invoice")
	sinktest.Start(t, sinks.Options{Instance: stage.Instance{Brokers: brokers}, Channel: feed.Channel, Provider: feed.New(cat), Catalog: cat})
	// The first command twice (a producer retry, a replayed input): the
	// sent-set keeps it to one item.
	sinktest.Produce(t, brokers, cat, a, b, a)
	audit := sinktest.AwaitOutcomes(t, brokers, cat, a.DeliveryID, b.DeliveryID)
	for _, c := range []*schemas.DeliveryCommand{a, b} {
		if o := audit.Outcomes[c.DeliveryID]; len(o) != 1 || o[0].Status != schemas.OutcomeDelivered {
			t.Fatalf("outcomes of %s: %+v, want one delivered", c.Recipient, o)
		}
		if at := audit.Attempts[c.DeliveryID]; len(at) != 1 || at[0].Result != schemas.AttemptSent || at[0].Classification != "written" {
			t.Fatalf("attempts of %s: %+v, want one written", c.Recipient, at)
		}
	}
	items := map[string][]schemas.FeedItem{}
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Feed)) {
		var it schemas.FeedItem
		if err := schemas.Decode(r.Value, &it); err != nil {
			t.Fatal(err)
		}
		if string(r.Key) != schemas.FeedKey(it.Tenant, it.Recipient, it.NotificationID) {
			t.Fatalf("key %q does not name its item %+v", r.Key, it)
		}
		items[string(r.Key)] = append(items[string(r.Key)], it)
	}
	for _, c := range []*schemas.DeliveryCommand{a, b} {
		got := items[schemas.FeedKey("acme", c.Recipient, c.NotificationID)]
		if len(got) != 1 || got[0].Title != c.Title || got[0].ReadAt != 0 || got[0].CreatedAt != c.CreatedAt {
			t.Fatalf("feed records of %s: %+v, want exactly one unread item", c.Recipient, got)
		}
	}
}
