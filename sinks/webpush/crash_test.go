package webpush_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/sinks/webpush"
)

// TestEachWebPushDeliveryOnceUnlessAuditedAmbiguousThroughSIGKILLs: two
// `herald sink --channel webpush` processes push 500 deliveries (and 50
// repeats) to 20 subscriptions on web-push-testing, SIGKILLed at random.
// Every delivery's payload arrives and decrypts at least once, more than
// once only if an attempt is audited ambiguous; one outcome each.
func TestEachWebPushDeliveryOnceUnlessAuditedAmbiguousThroughSIGKILLs(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 4)
	s := startPushService(t)
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	var subs []*schemas.WebPushSubscription
	var hashes []string
	for range 20 {
		sub, hash := s.subscribe(pub)
		sub.Endpoint = s.base + "/notify/" + hash // straight to the service, not through the recording proxy
		subs, hashes = append(subs, sub), append(hashes, hash)
	}
	cmds := make([]*schemas.DeliveryCommand, 500)
	byNotification := map[string]string{}
	for i := range cmds {
		nid := identity.DedupeID("acme", "t", "u1", fmt.Sprint("n", i))
		dev := fmt.Sprint("b", i%len(subs))
		cmds[i] = &schemas.DeliveryCommand{DeliveryID: identity.DeliveryID(nid, dev), NotificationID: nid, Tenant: "acme", Type: "t",
			Recipient: "u1", DeviceID: dev, Channel: "webpush", WebPush: subs[i%len(subs)], CollapseID: nid, Title: "t", Body: "b",
			CreatedAt: time.Now().UnixMilli(), ExpiresAt: time.Now().Add(time.Hour).UnixMilli()}
		byNotification[nid] = cmds[i].DeliveryID
	}
	a := sinktest.Crash{Channel: "webpush", Commands: cmds, Repeats: 50, Kills: 6,
		Args: []string{"--webpush-vapid-public-key", pub, "--webpush-vapid-private-key", priv}}.Run(t, brokers, cat)

	arrivals := map[string]int{}
	for _, h := range hashes {
		for _, m := range s.messages(h) {
			var p webpush.Payload
			if err := json.Unmarshal([]byte(m), &p); err != nil {
				t.Fatalf("undecryptable or unreadable payload %q: %v", m, err)
			}
			arrivals[byNotification[p.ID]]++
		}
	}
	twice := sinktest.CheckOnce(t, a, cmds, arrivals)
	t.Logf("%d deliveries arrived more than once (all audited ambiguous)", twice)
}
