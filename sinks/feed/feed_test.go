package feed

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

func TestAFeedItemKeepsItsNotificationsCreationTimeAndIsKeyedByRecipientAndNotification(t *testing.T) {
	now := time.UnixMilli(5_000)
	cases := []struct {
		name        string
		created     int64
		wantCreated int64
	}{
		{"a delivery's creation time is kept", 1_000, 1_000},
		{"a delivery without one is created now", 0, 5_000},
		{"a negative creation time is replaced by now", -1, 5_000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := &schemas.DeliveryCommand{Tenant: "acme", Recipient: "u/1", NotificationID: "n1", Type: "t", Title: "hi", CreatedAt: c.created}
			recs, err := New(topics.New(topics.Options{})).Records(cmd, now)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 {
				t.Fatalf("%d records, want the one feed item", len(recs))
			}
			var it schemas.FeedItem
			if err := schemas.Decode(recs[0].Value, &it); err != nil {
				t.Fatal(err)
			}
			if it.CreatedAt != c.wantCreated || it.DeliveredAt != 5_000 || it.Title != "hi" || it.NotificationID != "n1" {
				t.Fatalf("item %+v, want created %d, delivered 5000", it, c.wantCreated)
			}
			if k := string(recs[0].Key); k != schemas.FeedKey("acme", "u/1", "n1") {
				t.Fatalf("key %q, want the feed key of the recipient and notification", k)
			}
			if len(recs[0].Headers) != 1 || recs[0].Headers[0].Key != schemas.HeaderSchema || string(recs[0].Headers[0].Value) != it.SchemaName() {
				t.Fatalf("headers %v, want the schema", recs[0].Headers)
			}
		})
	}
}

func TestAFeedDeliveryWithoutItsIdentityIsRefused(t *testing.T) {
	for name, cmd := range map[string]*schemas.DeliveryCommand{
		"no tenant":          {Recipient: "u", NotificationID: "n"},
		"no recipient":       {Tenant: "acme", NotificationID: "n"},
		"no notification id": {Tenant: "acme", Recipient: "u"},
	} {
		if _, err := New(topics.New(topics.Options{})).Records(cmd, time.Now()); err == nil {
			t.Fatalf("a delivery with %s accepted", name)
		}
	}
}
