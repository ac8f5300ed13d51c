package webhook_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/sinks/webhook"
	"github.com/heraldhq/herald/sinks/webhook/emulator"
	"github.com/heraldhq/herald/topics"
)

// produce writes records of one topic, keyed, and waits for them.
func produce(t *testing.T, brokers []string, cat *topics.Catalog, topic string, recs map[string]schemas.Record) {
	t.Helper()
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	for k, v := range recs {
		b, err := schemas.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: cat.Name(topic), Key: []byte(k), Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// runChannel runs the webhook channel (table, fan-out, sink) until the
// test ends.
func runChannel(t *testing.T, brokers []string, cat *topics.Catalog, policy sinks.Policy) *webhook.Runners {
	t.Helper()
	r, err := webhook.NewChannel(webhook.ChannelOptions{Sink: sinks.Options{
		Instance:    stage.Instance{Brokers: brokers, InstanceID: "i1", BatchInterval: 20 * time.Millisecond, SessionTimeout: 6 * time.Second},
		Catalog:     cat,
		Policy:      policy,
		MaxInFlight: 16,
		CallTimeout: 2 * time.Second,
	},
		FanOut:       webhook.FanOutOptions{Instance: stage.Instance{BatchInterval: 20 * time.Millisecond, SessionTimeout: 6 * time.Second}},
		AllowPrivate: true}) // the receiver listens on loopback
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.Run(ctx, brokers, nil, nil); err != nil {
			t.Errorf("webhook channel: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

// TestOutcomesReachTheSubscribedEndpointsSignedOnTheRealBroker: outcomes
// on herald.outcomes become signed webhooks at the endpoints of their
// tenant subscribed to their events, through the fan-out and the sink on
// the real broker. The receiver verifies every signature; a 503 is
// retried with the same webhook-id; a 410 disables the endpoint on
// herald.webhooks; an endpoint that keeps answering 400 is dead-lettered
// after MaxAttempts; the webhook deliveries' own outcomes raise nothing.
func TestOutcomesReachTheSubscribedEndpointsSignedOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	em := startReceiver(t)
	eps := map[string]schemas.Webhook{}
	for _, id := range []string{"ok", "flaky", "gone", "broken"} {
		ep := endpoint(id, em.EndpointURL(id), schemas.EventDeliveryFailed)
		eps[id] = ep
		em.AddSecret(ep.Secret)
	}
	all := eps["ok"]
	all.Events = schemas.WebhookEvents
	eps["ok"] = all
	other := endpoint("other-tenant", em.EndpointURL("other-tenant"), schemas.WebhookEvents...)
	other.Tenant = "globex"
	em.AddRule(emulator.Rule{Token: "flaky", Status: 503, Times: 1})
	em.AddRule(emulator.Rule{Token: "gone", Status: 410})
	em.AddRule(emulator.Rule{Token: "broken", Status: 400})
	recs := map[string]schemas.Record{webhook.Key(other.Tenant, other.ID): &other}
	for _, ep := range eps {
		recs[webhook.Key(ep.Tenant, ep.ID)] = &ep
	}
	produce(t, brokers, cat, topics.Webhooks, recs)

	runChannel(t, brokers, cat, sinks.Policy{MaxAttempts: 3, Backoff: backoff.Policy{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond}})
	failed, delivered := outcome(), outcome()
	delivered.DeliveryID, delivered.Status, delivered.Reason = identity.DeliveryID(delivered.NotificationID, "d2"), schemas.OutcomeDelivered, ""
	produce(t, brokers, cat, topics.Outcomes, map[string]schemas.Record{failed.DeliveryID: failed, delivered.DeliveryID: delivered})

	var endpoints []schemas.Webhook
	for _, ep := range eps {
		endpoints = append(endpoints, ep)
	}
	want := append(webhook.Commands(failed, endpoints), webhook.Commands(delivered, endpoints)...)
	if len(want) != 6 { // failed: ok ×2 events, flaky, gone, broken; delivered: ok
		t.Fatalf("%d webhook deliveries expected, want 6", len(want))
	}
	ids := make([]string, len(want))
	for i, c := range want {
		ids[i] = c.DeliveryID
	}
	a := sinktest.AwaitOutcomes(t, brokers, cat, ids...)

	wantStatus := map[string]string{"ok": schemas.OutcomeDelivered, "flaky": schemas.OutcomeDelivered, "gone": schemas.OutcomeDeviceRetired, "broken": schemas.OutcomeFailed}
	wantTries := map[string]int{"ok": 1, "flaky": 2, "gone": 1, "broken": 3}
	for _, c := range want {
		t.Run(c.DeviceID+" "+c.Title+" ends "+wantStatus[c.DeviceID], func(t *testing.T) {
			if o := a.Outcomes[c.DeliveryID]; len(o) != 1 || o[0].Status != wantStatus[c.DeviceID] || o[0].Channel != webhook.Channel {
				t.Fatalf("outcomes %+v, want one %s", o, wantStatus[c.DeviceID])
			}
			if at := a.Attempts[c.DeliveryID]; len(at) != wantTries[c.DeviceID] || at[0].CollapseID != c.CollapseID {
				t.Fatalf("attempts %+v, want %d carrying webhook-id %s", at, wantTries[c.DeviceID], c.CollapseID)
			}
			if got, want := a.Dead[c.DeliveryID], map[bool]int{true: 1}[c.DeviceID == "broken"]; got != want {
				t.Errorf("%d dead letters, want %d", got, want)
			}
		})
	}
	t.Run("the receiver verified every message and each delivery kept its webhook-id", func(t *testing.T) {
		byID := map[string]int{}
		for _, m := range em.Received() {
			if !m.Verified {
				t.Errorf("%s at %s did not verify: %s", m.ID, m.Endpoint, m.VerifyError)
			}
			byID[m.Endpoint+" "+m.ID]++
			if m.Endpoint == "other-tenant" {
				t.Error("another tenant's endpoint received an event")
			}
		}
		for _, c := range want {
			if n := byID[c.DeviceID+" "+c.CollapseID]; n != wantTries[c.DeviceID] {
				t.Errorf("%s received %s %d times, want %d", c.DeviceID, c.CollapseID, n, wantTries[c.DeviceID])
			}
		}
		if em.Total() != 1+1+1+2+1+3 {
			t.Errorf("the receiver read %d messages, want 9: the webhooks' own outcomes must raise nothing", em.Total())
		}
	})
	t.Run("the 410 disabled the endpoint on herald.webhooks", func(t *testing.T) {
		var last *schemas.Webhook
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Webhooks)) {
			if string(r.Key) == webhook.Key("acme", "gone") {
				var w schemas.Webhook
				if err := schemas.Decode(r.Value, &w); err != nil {
					t.Fatal(err)
				}
				last = &w
			}
		}
		if last == nil || last.Enabled || last.DisabledReason == "" || last.URL != eps["gone"].URL || last.Secret != eps["gone"].Secret {
			t.Fatalf("last record %+v, want the endpoint disabled with a reason, url and secret kept", last)
		}
	})
}

// TestTheEndpointsTableCatchesUpWithTransactionalWrites: the API writes
// herald.webhooks in transactions, so each partition ends with a commit
// marker; the table still becomes ready, holding what was committed and
// not what was aborted.
func TestTheEndpointsTableCatchesUpWithTransactionalWrites(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	cl := testenv.Client(t, brokers, kgo.TransactionalID("wh-table-"+cat.Name("")), kgo.RecordPartitioner(cat.Partitioner()))
	ctx := context.Background()
	write := func(commit kgo.TransactionEndTry, eps ...schemas.Webhook) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, ep := range eps {
			b, err := schemas.Encode(&ep)
			if err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: cat.Name(topics.Webhooks), Key: []byte(webhook.Key(ep.Tenant, ep.ID)), Value: b}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	write(kgo.TryCommit, endpoint("a", "http://x/a", schemas.EventDeliveryFailed), endpoint("b", "http://x/b", schemas.EventDeliveryFailed))
	write(kgo.TryAbort, endpoint("aborted", "http://x/c", schemas.EventDeliveryFailed))

	tbl := webhook.NewTable(cat.Name(topics.Webhooks))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tbl.Run(runCtx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	waitCtx, stop := context.WithTimeout(ctx, time.Minute) // a guard against a hang, not a speed claim
	defer stop()
	if err := tbl.WaitReady(waitCtx); err != nil {
		t.Fatalf("the table never caught up: %v", err)
	}
	got := tbl.Tenant("acme")
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" {
		t.Fatalf("the table holds %+v, want a and b (not the aborted one)", got)
	}
}
