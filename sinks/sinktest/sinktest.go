// Package sinktest owns what the channel adapters' real-broker tests share:
// running one sink instance of a channel in-process on the test's topics,
// producing delivery commands the way the route stage does (keyed by
// delivery id, on herald.deliveries.<channel>), and reading back what the
// sink committed (attempts, outcomes, dead letters, device updates)
// read_committed. Test code only.
package sinktest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/topics"
)

// Start runs one sink instance for o.Channel until the test ends or stop
// is called (it waits for the instance to return); InstanceID and the
// batching knobs get test defaults.
func Start(t *testing.T, o sinks.Options) (stop func()) {
	t.Helper()
	if o.InstanceID == "" {
		o.InstanceID = "i1"
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 64
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = 2 * time.Second
	}
	if o.BatchInterval == 0 {
		o.BatchInterval = 20 * time.Millisecond
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 6 * time.Second
	}
	r, err := sinks.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.Run(ctx); err != nil {
			t.Errorf("sink %s: %v", o.Channel, err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// Produce writes the commands to their channel's deliveries topic, keyed
// by delivery id.
func Produce(t *testing.T, brokers []string, cat *topics.Catalog, cmds ...*schemas.DeliveryCommand) {
	t.Helper()
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	for _, c := range cmds {
		b, err := schemas.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: cat.Name(topics.Deliveries(c.Channel)), Key: []byte(c.DeliveryID), Value: b}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// RegisterDevices registers, as the API does (outside a transaction), the
// device each command is for, enabled, with the command's token or Web Push
// subscription: a sink retires only a device herald.devices has.
func RegisterDevices(t *testing.T, brokers []string, cat *topics.Catalog, cmds ...*schemas.DeliveryCommand) {
	t.Helper()
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	platform := map[string]string{"apns": "ios", "fcm": "android", "webpush": "web", "email": "email"}
	now := time.Now().UnixMilli()
	for _, c := range cmds {
		b, err := schemas.Encode(&schemas.Device{Tenant: c.Tenant, Recipient: c.Recipient, DeviceID: c.DeviceID, Platform: platform[c.Channel],
			Token: c.Token, WebPush: c.WebPush, Locale: c.Locale, Enabled: true, CreatedAt: now, UpdatedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: cat.Name(topics.Devices), Key: []byte(schemas.DeviceKey(c.Tenant, c.Recipient, c.DeviceID)), Value: b}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// Audit is what the sinks committed, per delivery id (devices per device
// id: the last update a sink wrote in a transaction; registrations written
// by RegisterDevices are not sinks' and are left out).
type Audit struct {
	Attempts map[string][]schemas.Attempt
	Outcomes map[string][]schemas.Outcome
	Dead     map[string]int
	Devices  map[string]schemas.Device
}

// Read reads the audit topics read_committed.
func Read(t *testing.T, brokers []string, cat *topics.Catalog) Audit {
	t.Helper()
	a := Audit{Attempts: map[string][]schemas.Attempt{}, Outcomes: map[string][]schemas.Outcome{}, Dead: map[string]int{}, Devices: map[string]schemas.Device{}}
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Attempts)) {
		var x schemas.Attempt
		decode(t, r, &x)
		a.Attempts[x.DeliveryID] = append(a.Attempts[x.DeliveryID], x)
	}
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Outcomes)) {
		var x schemas.Outcome
		decode(t, r, &x)
		a.Outcomes[x.DeliveryID] = append(a.Outcomes[x.DeliveryID], x)
	}
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.DeadLetters)) {
		if redriveMarker(r) {
			continue
		}
		a.Dead[string(r.Key)]++
	}
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Devices)) {
		if !r.Attrs.IsTransactional() {
			continue // a registration, not a sink's update
		}
		var x schemas.Device
		decode(t, r, &x)
		a.Devices[x.DeviceID] = x
	}
	return a
}

// redriveMarker reports whether r is a redrive's marker on
// herald.deadletters (sinks/deadletters.HeaderRedriven), not a dead letter.
func redriveMarker(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == "herald-redriven" {
			return true
		}
	}
	return false
}

func decode(t *testing.T, r *kgo.Record, v schemas.Record) {
	t.Helper()
	if err := schemas.Decode(r.Value, v); err != nil {
		t.Fatalf("decode %s@%d: %v", r.Topic, r.Offset, err)
	}
}

// AwaitOutcomes waits (up to two minutes) until every delivery has an
// outcome, and returns the audit read after that.
func AwaitOutcomes(t *testing.T, brokers []string, cat *topics.Catalog, ids ...string) Audit {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		a := Read(t, brokers, cat)
		missing := 0
		for _, id := range ids {
			if len(a.Outcomes[id]) == 0 {
				missing++
			}
		}
		if missing == 0 {
			// The topics were read one after another: read them again, now
			// that every outcome's transaction (and so its attempts,
			// dead letters and device updates) is known to be committed.
			return Read(t, brokers, cat)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries have no outcome", missing, len(ids))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
