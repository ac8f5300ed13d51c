package sinks_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/sinktest"
)

// unregisters is a provider answering every call with a token error.
type unregisters struct{}

func (unregisters) Send(context.Context, *schemas.DeliveryCommand) sinks.Result {
	return sinks.Result{Class: sinks.Permanent, Rule: "unregistered", Status: 410, Reason: "Unregistered", RetireDevice: true}
}

// writes is a Writer channel writing nothing but its outcome.
type writes struct{ unregisters }

func (writes) Records(*schemas.DeliveryCommand, time.Time) ([]*kgo.Record, error) { return nil, nil }

// A fast test of whole sinks on kfake (the real broker's runs are in
// kafka_test.go, rebalance_test.go and crash_test.go): New wires the stage
// and, for a channel that retires devices, herald.devices, which Run reads
// before the first delivery; a sink is ready only while it runs.
func TestASinkOnKfakeIsReadyWhileRunningAndReadsItsDevicesBeforeItsFirstDelivery(t *testing.T) {
	c := testenv.Kfake(t)
	brokers := c.ListenAddrs()
	cat := testenv.Catalog(t, brokers, 2)
	cases := []struct {
		name     string
		channel  string
		provider sinks.Provider
		outcome  string
		retired  bool
	}{
		{"a token error retires the device registered before the sink started", "apns", unregisters{}, schemas.OutcomeDeviceRetired, true},
		{"a Writer channel, which retires no device, delivers in the transaction", "feed", writes{}, schemas.OutcomeDelivered, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := deliveryCmd("kfake-"+tc.channel, "dev-"+tc.channel)
			cmd.Channel = tc.channel
			sinktest.RegisterDevices(t, brokers, cat, cmd)
			sinktest.Produce(t, brokers, cat, cmd)
			s, err := sinks.New(sinks.Options{
				Instance: stage.Instance{Brokers: brokers, InstanceID: "s1" + embedded.TransactionalSuffix(), ResetOffsets: embedded.ResetOffsets,
					BatchInterval: 10 * time.Millisecond, ClientOpts: append(embedded.ClientOpts(), kgo.FetchMaxWait(100*time.Millisecond)),
					Metrics: metrics.NewRegistry()},
				Channel: tc.channel, Provider: tc.provider, Catalog: cat,
			})
			if err != nil {
				t.Fatal(err)
			}
			if s.Ready() {
				t.Fatal("ready before it ran")
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			a := sinktest.AwaitOutcomes(t, brokers, cat, cmd.DeliveryID)
			for deadline := time.Now().Add(testenv.Guard()); !s.Ready(); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("not ready while running")
				}
			}
			cancel()
			if err := testenv.Await(t, done, "the cancelled sink's Run"); err != nil {
				t.Fatalf("sink: %v", err)
			}
			if o := a.Outcomes[cmd.DeliveryID]; len(o) != 1 || o[0].Status != tc.outcome {
				t.Fatalf("outcomes %+v, want one %s", o, tc.outcome)
			}
			if d, ok := a.Devices[cmd.DeviceID]; ok != tc.retired || ok && d.Enabled {
				t.Fatalf("device update %+v (written %v), want retired %v", d, ok, tc.retired)
			}
		})
	}
}
