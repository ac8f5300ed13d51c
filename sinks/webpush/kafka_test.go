package webpush_test

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/sinktest"
)

func TestTheWebPushSinkDeliversAndRetiresAnExpiredSubscriptionOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	s := startPushService(t)
	p, pub := newProvider(t)
	live, liveHash := s.subscribe(pub)
	gone, goneHash := s.subscribe(pub)
	s.expire(goneHash)

	ok, expired := command(live), command(gone)
	expired.DeviceID = "b2"
	expired.DeliveryID = identity.DeliveryID(nid, "b2")
	sinktest.Start(t, sinks.Options{Channel: "webpush", Provider: p, Brokers: brokers, Catalog: cat,
		Policy: sinks.Policy{MaxAttempts: 3, Backoff: backoff.Policy{Min: 100 * time.Millisecond, Max: 500 * time.Millisecond}}})
	sinktest.Produce(t, brokers, cat, ok, expired)
	a := sinktest.AwaitOutcomes(t, brokers, cat, ok.DeliveryID, expired.DeliveryID)

	if o := a.Outcomes[ok.DeliveryID]; len(o) != 1 || o[0].Status != schemas.OutcomeDelivered {
		t.Fatalf("the live subscription's outcomes %+v, want one delivered", o)
	}
	if got := s.messages(liveHash); len(got) != 1 {
		t.Fatalf("the live subscription received %d pushes, want 1", len(got))
	}
	if o := a.Outcomes[expired.DeliveryID]; len(o) != 1 || o[0].Status != schemas.OutcomeDeviceRetired {
		t.Fatalf("the expired subscription's outcomes %+v, want one device_retired", o)
	}
	if at := a.Attempts[expired.DeliveryID]; len(at) != 1 || at[0].Classification != "expired_subscription" || at[0].ProviderStatus != 410 {
		t.Fatalf("the expired subscription's attempts %+v, want one expired_subscription 410", at)
	}
	d, found := a.Devices["b2"]
	if !found || d.Enabled || d.Platform != "web" || d.WebPush == nil || d.WebPush.Endpoint != gone.Endpoint {
		t.Fatalf("device update %+v (found %v), want b2 disabled with its subscription", d, found)
	}
	if _, found := a.Devices["b1"]; found {
		t.Fatal("the live device was updated")
	}
}
