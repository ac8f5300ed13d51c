package webhook_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/sinks/webhook"
	"github.com/heraldhq/herald/sinks/webhook/emulator"
	"github.com/heraldhq/herald/topics"
)

// TestEachWebhookDeliveryOnceUnlessAuditedAmbiguousThroughSIGKILLs: two
// `herald sink --channel webhook` processes over 400 webhook deliveries
// (80 outcomes to 5 endpoints, and 40 repeats), SIGKILLed at random while
// the receiver resets 2 % of the requests after reading them and answers
// 1 % too late. Every delivery reaches its endpoint at least once, more
// than once only if an attempt is audited ambiguous, every time with the
// same webhook-id and a signature the receiver verifies; one outcome
// each; attempts numbered 1..n.
func TestEachWebhookDeliveryOnceUnlessAuditedAmbiguousThroughSIGKILLs(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 4)
	em, err := emulator.Start(emulator.Options{Latency: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	em.SetFaults(emulator.Faults{ResetRate: 0.02, SlowRate: 0.01, SlowDelay: 5 * time.Second})

	var eps []schemas.Webhook
	recs := map[string]schemas.Record{}
	for i := range 5 {
		ep := endpoint(fmt.Sprint("ep", i), em.EndpointURL(fmt.Sprint("ep", i)), schemas.EventDeliveryCompleted)
		em.AddSecret(ep.Secret)
		eps = append(eps, ep)
		recs[webhook.Key(ep.Tenant, ep.ID)] = &eps[i]
	}
	produce(t, brokers, cat, topics.Webhooks, recs)

	var cmds []*schemas.DeliveryCommand
	for i := range 80 {
		o := outcome()
		o.Status = schemas.OutcomeDelivered
		o.DeliveryID = identity.DeliveryID(o.NotificationID, fmt.Sprint("d", i))
		cmds = append(cmds, webhook.Commands(o, eps)...)
	}
	if len(cmds) != 400 {
		t.Fatalf("%d commands, want 400", len(cmds))
	}
	for _, c := range cmds {
		c.ExpiresAt = time.Now().Add(time.Hour).UnixMilli()
	}
	a := sinktest.Crash{Channel: "webhook", Commands: cmds, Repeats: 40, Kills: 6,
		Args: []string{"--webhook-allow-private"}}.Run(t, brokers, cat)

	byMessage := map[string]string{}
	for _, c := range cmds {
		byMessage[c.DeviceID+" "+c.CollapseID] = c.DeliveryID
	}
	arrivals := map[string]int{}
	for _, m := range em.Received() {
		id, ok := byMessage[m.Endpoint+" "+m.ID]
		if !ok {
			t.Errorf("%s received webhook-id %s, which no delivery of it carries", m.Endpoint, m.ID)
			continue
		}
		if !m.Verified {
			t.Errorf("%s at %s did not verify: %s", m.ID, m.Endpoint, m.VerifyError)
		}
		arrivals[id]++
	}
	twice := sinktest.CheckOnce(t, a, cmds, arrivals)
	t.Logf("%d messages read, %d deliveries arrived more than once (all audited ambiguous)", em.Total(), twice)
}
