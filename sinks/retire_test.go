package sinks_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns/emulator"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/topics"
)

// TestARetiredDeviceGetsNothingMore runs the route stage and the APNs sink
// together: APNs answers 410 Unregistered for an iPhone, the sink retires
// it on herald.devices in the transaction of its outcome, and the next
// notification to the same user reaches the other iPhone only.
func TestARetiredDeviceGetsNothingMore(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	em, err := emulator.Start(emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	em.AddRule(emulator.Rule{Token: "tok-old", Status: 410, Reason: "Unregistered"})

	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	put := func(topic, key string, v schemas.Record) {
		t.Helper()
		b, err := schemas.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte(key), Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"old", "new"} {
		put(cat.Name(topics.Devices), schemas.DeviceKey("acme", "u1", d), &schemas.Device{Tenant: "acme", Recipient: "u1", DeviceID: d,
			Platform: "ios", Token: "tok-" + d, Enabled: true, CreatedAt: time.Now().UnixMilli(), UpdatedAt: time.Now().UnixMilli()})
	}
	notify := func(key string) string {
		n := schemas.Accepted{NotificationID: identity.DedupeID("acme", "t", "u1", key), RequestID: identity.NewRandomID(),
			Tenant: "acme", Type: "t", Recipient: "u1", Title: key, Body: "b", RequestedAt: time.Now().UnixMilli(), AcceptedAt: time.Now().UnixMilli()}
		put(cat.Name(topics.Accepted), schemas.RecipientKey("acme", "u1"), &n)
		return n.NotificationID
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	run := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	run("route", func(ctx context.Context) error {
		return route.Run(ctx, route.Options{Instance: stage.Instance{Brokers: brokers, InstanceID: "r1", BatchInterval: 20 * time.Millisecond}, Catalog: cat})
	})
	startSink(t, brokers, cat, em, sinks.Policy{Backoff: backoff.Policy{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	t.Cleanup(func() { cancel(); wg.Wait() })

	first := notify("first")
	oldID, newID := identity.DeliveryID(first, "old"), identity.DeliveryID(first, "new")
	a := sinktest.AwaitOutcomes(t, brokers, cat, oldID, newID)
	if got := a.Outcomes[oldID][0].Status; got != schemas.OutcomeDeviceRetired {
		t.Fatalf("first notification to the old iPhone: %s, want device_retired", got)
	}
	second := notify("second")
	a = sinktest.AwaitOutcomes(t, brokers, cat, identity.DeliveryID(second, "new"))
	if len(a.Outcomes[identity.DeliveryID(second, "old")]) != 0 {
		t.Fatalf("the retired iPhone got a delivery of the second notification: %+v", a.Outcomes[identity.DeliveryID(second, "old")])
	}
	tokens := map[string]int{}
	for _, p := range em.Received() {
		tokens[p.Token]++
	}
	if tokens["tok-old"] != 1 || tokens["tok-new"] != 2 {
		t.Fatalf("pushes per token %v, want the old iPhone once (its 410), the new one twice", tokens)
	}
}

// TestATokenErrorRetiresOnlyTheDeviceThatStillHasTheToken: a token error
// retires the device as herald.devices has it (tags, time zone, locale and
// creation time kept), and only while the device still has the token the
// push was sent to: a device registered again with a new token between the
// fan-out and the answer keeps its new token, enabled, and the delivery
// fails without retiring anything.
func TestATokenErrorRetiresOnlyTheDeviceThatStillHasTheToken(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	em, err := emulator.Start(emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	em.AddRule(emulator.Rule{Token: "tok-kept", Status: 410, Reason: "Unregistered"})
	em.AddRule(emulator.Rule{Token: "tok-moved", Status: 410, Reason: "Unregistered"})

	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	created := time.Now().Add(-time.Hour).UnixMilli()
	register := func(id, token string) schemas.Device {
		t.Helper()
		d := schemas.Device{Tenant: "acme", Recipient: "u1", DeviceID: id, Platform: "ios", Token: token, Enabled: true,
			Locale: "fr-FR", TimeZone: "Europe/Paris", Tags: []string{"vip", "beta"}, CreatedAt: created, UpdatedAt: time.Now().UnixMilli()}
		b, err := schemas.Encode(&d)
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: cat.Name(topics.Devices), Key: []byte(schemas.DeviceKey("acme", "u1", id)), Value: b}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return d
	}
	register("kept", "tok-kept")
	register("moved", "tok-moved")
	// The fan-out wrote the commands with the tokens of then; "moved" is
	// registered again with a new token before the sink gets the answer.
	kept, moved := deliveryCmd("n", "kept"), deliveryCmd("n", "moved")
	reregistered := register("moved", "tok-moved-new")

	startSink(t, brokers, cat, em, sinks.Policy{})
	sinktest.Produce(t, brokers, cat, kept, moved)
	a := sinktest.AwaitOutcomes(t, brokers, cat, kept.DeliveryID, moved.DeliveryID)

	t.Run("the device that still has the token is retired with every other field kept", func(t *testing.T) {
		if got := a.Outcomes[kept.DeliveryID][0].Status; got != schemas.OutcomeDeviceRetired {
			t.Errorf("outcome %s, want device_retired", got)
		}
		d := a.Devices["kept"]
		if d.Enabled || d.RetiredReason == "" {
			t.Errorf("device %+v, want retired", d)
		}
		if d.Token != "tok-kept" || d.TimeZone != "Europe/Paris" || d.Locale != "fr-FR" || fmt.Sprint(d.Tags) != "[vip beta]" || d.CreatedAt != created {
			t.Errorf("retired device %+v lost fields of its registration", d)
		}
	})
	t.Run("a device registered again with a new token is not retired by an answer about its old one", func(t *testing.T) {
		if got := a.Outcomes[moved.DeliveryID][0].Status; got != schemas.OutcomeFailed {
			t.Errorf("outcome %s, want failed", got)
		}
		if d, found := a.Devices["moved"]; found {
			t.Errorf("the sink wrote device %+v over its new registration %+v", d, reregistered)
		}
	})
}
