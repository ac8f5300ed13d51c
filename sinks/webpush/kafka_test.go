package webpush_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/sinks/webpush/emulator"
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
	sinktest.RegisterDevices(t, brokers, cat, ok, expired)
	sinktest.Start(t, sinks.Options{
		Instance: stage.Instance{Brokers: brokers},
		Channel:  "webpush",
		Provider: p,
		Catalog:  cat,
		Policy:   sinks.Policy{MaxAttempts: 3, Backoff: backoff.Policy{Min: 100 * time.Millisecond, Max: 500 * time.Millisecond}},
	})
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

// TestTheWebPushSinkActsOnEachFaultOfThePushServiceOnTheRealBroker: through
// the faulting push service, a 429 with Retry-After is retried (after at
// least that long) and delivered, a 5xx twice then 201 is delivered on the
// third attempt, a 413 fails with a dead letter and keeps the device, a
// 410 retires the device.
func TestTheWebPushSinkActsOnEachFaultOfThePushServiceOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	em := startEmulator(t)
	p, _ := newProvider(t)
	type row struct {
		dev    string
		rules  []emulator.Rule
		status string
		tries  int
	}
	rows := []row{
		{"throttled", []emulator.Rule{{Status: 429, RetryAfter: time.Second, Times: 1}}, schemas.OutcomeDelivered, 2},
		{"flaky", []emulator.Rule{{Status: 503, Times: 2}}, schemas.OutcomeDelivered, 3},
		{"toolarge", []emulator.Rule{{Status: 413}}, schemas.OutcomeFailed, 1},
		{"gone", []emulator.Rule{{Status: 410}}, schemas.OutcomeDeviceRetired, 1},
	}
	var cmds []*schemas.DeliveryCommand
	for _, r := range rows {
		sub, err := em.Subscribe(r.dev)
		if err != nil {
			t.Fatal(err)
		}
		for _, rule := range r.rules {
			rule.Token = r.dev
			em.AddRule(rule)
		}
		c := command(sub)
		c.DeviceID, c.DeliveryID = r.dev, identity.DeliveryID(nid, r.dev)
		cmds = append(cmds, c)
	}
	sinktest.RegisterDevices(t, brokers, cat, cmds...)
	sinktest.Start(t, sinks.Options{
		Instance: stage.Instance{Brokers: brokers},
		Channel:  "webpush",
		Provider: p,
		Catalog:  cat,
		Policy:   sinks.Policy{MaxAttempts: 5, Backoff: backoff.Policy{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond}},
	})
	sinktest.Produce(t, brokers, cat, cmds...)
	ids := make([]string, len(cmds))
	for i, c := range cmds {
		ids[i] = c.DeliveryID
	}
	a := sinktest.AwaitOutcomes(t, brokers, cat, ids...)
	for i, r := range rows {
		t.Run(r.dev+" ends "+r.status+" after "+fmt.Sprint(r.tries)+" attempts", func(t *testing.T) {
			id := cmds[i].DeliveryID
			if o := a.Outcomes[id]; len(o) != 1 || o[0].Status != r.status {
				t.Fatalf("outcomes %+v, want one %s", o, r.status)
			}
			at := a.Attempts[id]
			if len(at) != r.tries {
				t.Fatalf("%d attempts %+v, want %d", len(at), at, r.tries)
			}
			if r.dev == "throttled" && time.UnixMilli(at[1].At).Sub(time.UnixMilli(at[0].At)) < time.Second {
				t.Errorf("the retry came %v after the 429, before its Retry-After of 1s", time.UnixMilli(at[1].At).Sub(time.UnixMilli(at[0].At)))
			}
			if got, want := a.Dead[id], map[bool]int{true: 1}[r.status == schemas.OutcomeFailed]; got != want {
				t.Errorf("%d dead letters, want %d", got, want)
			}
			d, retired := a.Devices[r.dev]
			if want := r.status == schemas.OutcomeDeviceRetired; retired != want || (retired && d.Enabled) {
				t.Errorf("device update %+v (found %v), want one disabling it: %v", d, retired, want)
			}
		})
	}
}
