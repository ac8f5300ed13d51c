package webhook_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/sinks/webhook"
	"github.com/heraldhq/herald/sinks/webhook/emulator"
	"github.com/heraldhq/herald/topics"
)

// notification is one notification of the completion tests: its route
// decision, its deliveries' outcomes, and whether they all end.
type notification struct {
	id       string
	tenant   string
	decision *schemas.Decision
	outcomes []*schemas.Outcome
}

// newNotification routes notification i of a tenant to devices channel
// "ch/dev" each; every delivery ends delivered unless open lists it
// (then it never ends).
func newNotification(i int, tenant string, deliveries []string, open map[string]bool) notification {
	n := notification{id: identity.DedupeID(tenant, "invoice.paid", "u1", fmt.Sprint("n", i)), tenant: tenant}
	n.decision = &schemas.Decision{DecisionID: fmt.Sprintf("route/herald.accepted/0/%d", i), Stage: "route", Outcome: schemas.DecisionRouted,
		Tenant: tenant, Type: "invoice.paid", Recipient: "u1", NotificationID: n.id, At: time.Now().UnixMilli()}
	if len(deliveries) == 0 {
		n.decision.Outcome = schemas.DecisionRateLimited
	}
	for _, cd := range deliveries {
		ch, dev, _ := strings.Cut(cd, "/")
		id := identity.DeliveryID(n.id, dev)
		n.decision.Deliveries = append(n.decision.Deliveries, schemas.DecisionDelivery{DeliveryID: id, Channel: ch, DeviceID: dev, State: schemas.DeliveryQueued})
		if !open[cd] {
			n.outcomes = append(n.outcomes, &schemas.Outcome{DeliveryID: id, NotificationID: n.id, Tenant: tenant, Type: "invoice.paid", Recipient: "u1",
				DeviceID: dev, Channel: ch, Status: schemas.OutcomeDelivered, Attempts: 1, At: time.Now().UnixMilli()})
		}
	}
	return n
}

// again is n accepted again after its dedupe window: a new occurrence of
// the same notification, with delivery ids of its own.
func (n notification) again(occurrence string) notification {
	d := *n.decision
	d.OccurrenceID, d.Deliveries = occurrence, nil
	m := notification{id: n.id, tenant: n.tenant, decision: &d}
	for _, dd := range n.decision.Deliveries {
		dd.DeliveryID = identity.DeliveryID(occurrence, dd.DeviceID)
		d.Deliveries = append(d.Deliveries, dd)
	}
	for _, o := range n.outcomes {
		c := *o
		c.OccurrenceID, c.DeliveryID = occurrence, identity.DeliveryID(occurrence, o.DeviceID)
		m.outcomes = append(m.outcomes, &c)
	}
	return m
}

// records are the notification's records as the route stage and the
// sinks write them: the decision on herald.decisions, each outcome on
// herald.outcomes, in the order given by perm (a permutation of
// 0..len(outcomes), where len(outcomes) is the decision).
func (n notification) records(cat *topics.Catalog, perm []int) []*kgo.Record {
	var out []*kgo.Record
	for _, i := range perm {
		var topic, key string
		var v schemas.Record
		if i == len(n.outcomes) {
			topic, key, v = cat.Name(topics.Decisions), n.id, n.decision
		} else {
			topic, key, v = cat.Name(topics.Outcomes), n.outcomes[i].DeliveryID, n.outcomes[i]
		}
		b, err := schemas.Encode(v)
		if err != nil {
			panic(err)
		}
		out = append(out, &kgo.Record{Topic: topic, Key: []byte(key), Value: b,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(v.SchemaName())}}})
	}
	return out
}

// expected are the send.completed commands of a notification whose
// deliveries all end (nil otherwise).
func (n notification) expected(eps []schemas.Webhook) []*schemas.DeliveryCommand {
	var e *schemas.Completion
	e, _ = webhook.ApplyDecision(e, n.decision, 0)
	for _, o := range n.outcomes {
		e, _ = webhook.ApplyOutcome(e, o, 0)
	}
	if !webhook.Complete(e) {
		return nil
	}
	return webhook.CompletionCommands(e, eps)
}

// sendCompleted reads herald.deliveries.webhook: how many send.completed
// commands of each delivery id were committed.
func sendCompleted(t *testing.T, brokers []string, cat *topics.Catalog) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Deliveries(webhook.Channel))) {
		var c schemas.DeliveryCommand
		if err := schemas.Decode(r.Value, &c); err != nil {
			t.Fatal(err)
		}
		if c.Title == schemas.EventSendCompleted {
			n[c.DeliveryID]++
		}
	}
	return n
}

// TestOneSendCompletedPerNotificationOnTheRealBroker: route decisions on
// herald.decisions and outcomes on herald.outcomes, outcomes sometimes
// first, become one signed send.completed per notification and
// subscribed endpoint, through the forwarders, the completion stage and
// the sink on the real broker; each occurrence of a notification accepted
// twice raises its own; a notification with a delivery still open raises
// none, nor does a tenant without a send.completed endpoint.
func TestOneSendCompletedPerNotificationOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 3)
	em := startReceiver(t)
	eps := []schemas.Webhook{
		endpoint("done", em.EndpointURL("done"), schemas.EventSendCompleted),
		endpoint("both", em.EndpointURL("both"), schemas.EventSendCompleted, schemas.EventDeliveryFailed),
	}
	quiet := endpoint("quiet", em.EndpointURL("quiet"), schemas.EventDeliveryFailed)
	quiet.Tenant = "globex"
	recs := map[string]schemas.Record{webhook.Key(quiet.Tenant, quiet.ID): &quiet}
	for i := range eps {
		em.AddSecret(eps[i].Secret)
		recs[webhook.Key(eps[i].Tenant, eps[i].ID)] = &eps[i]
	}
	em.AddSecret(quiet.Secret)
	produce(t, brokers, cat, topics.Webhooks, recs)
	runChannel(t, brokers, cat, sinks.Policy{MaxAttempts: 3, Backoff: backoff.Policy{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond}})

	ns := []notification{
		newNotification(1, "acme", []string{"apns/phone", "fcm/pixel", "feed/feed"}, nil),
		newNotification(2, "acme", []string{"webpush/browser"}, nil),
		newNotification(3, "acme", nil, nil), // rate limited: skipped at once
		newNotification(4, "acme", []string{"apns/phone", "feed/feed"}, map[string]bool{"apns/phone": true}),
		newNotification(5, "globex", []string{"feed/feed"}, nil),
	}
	// Notification 6 accepted twice (after its dedupe window): two
	// occurrences, two events.
	twice := newNotification(6, "acme", []string{"apns/phone"}, nil)
	ns = append(ns, twice.again(identity.OccurrenceID(twice.id, 1_000)), twice.again(identity.OccurrenceID(twice.id, 90_000_000)))
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	var want []*schemas.DeliveryCommand
	for i, n := range ns {
		perm := make([]int, len(n.outcomes)+1)
		for j := range perm {
			perm[j] = (j + i) % len(perm) // decision first for some, outcomes first for others
		}
		for _, rec := range n.records(cat, perm) {
			if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, n.expected(append(eps, quiet))...)
	}
	if len(want) != 10 { // notifications 1, 2, 3 and both occurrences of 6 to both endpoints
		t.Fatalf("%d send.completed deliveries expected, want 10", len(want))
	}
	ids := make([]string, len(want))
	for i, c := range want {
		ids[i] = c.DeliveryID
	}
	a := sinktest.AwaitOutcomes(t, brokers, cat, ids...)

	t.Run("each notification's event reached each subscribed endpoint once, verified, with its webhook-id", func(t *testing.T) {
		got := map[string]int{}
		for _, m := range em.Received() {
			if !m.Verified {
				t.Errorf("%s at %s did not verify: %s", m.ID, m.Endpoint, m.VerifyError)
			}
			var ev webhook.CompletionEvent
			if err := json.Unmarshal([]byte(m.Body), &ev); err != nil || ev.Type != schemas.EventSendCompleted {
				t.Errorf("%s received %s (%v), want only send.completed events", m.Endpoint, m.Body, err)
				continue
			}
			occurrence := schemas.Occurrence(ev.Data.NotificationID, ev.Data.OccurrenceID)
			if m.ID != "msg_"+identity.WebhookEventID(occurrence, schemas.EventSendCompleted) {
				t.Errorf("webhook-id %s is not the occurrence %s's", m.ID, occurrence)
			}
			got[m.Endpoint+" "+m.ID]++
		}
		for _, c := range want {
			if n := got[c.DeviceID+" "+c.CollapseID]; n != 1 || len(a.Outcomes[c.DeliveryID]) != 1 {
				t.Errorf("%s received %s's event %d times (outcomes %+v), want once", c.DeviceID, c.NotificationID, n, a.Outcomes[c.DeliveryID])
			}
		}
		if len(got) != len(want) {
			t.Errorf("events %v, want %d: none for the open notification nor for globex", got, len(want))
		}
	})
	t.Run("the summary counts each channel's final states", func(t *testing.T) {
		for _, m := range em.Received() {
			var ev webhook.CompletionEvent
			_ = json.Unmarshal([]byte(m.Body), &ev)
			switch ev.Data.NotificationID {
			case ns[0].id:
				if ev.Data.Status != webhook.CompletedDelivered || len(ev.Data.Deliveries) != 3 || ev.Data.Channels["fcm"]["delivered"] != 1 {
					t.Errorf("notification 1: %s", m.Body)
				}
			case ns[2].id:
				if ev.Data.Status != webhook.CompletedSkipped || ev.Data.Decision != schemas.DecisionRateLimited || len(ev.Data.Deliveries) != 0 {
					t.Errorf("notification 3: %s", m.Body)
				}
			}
		}
	})
	t.Run("herald.deliveries.webhook holds each send.completed command once", func(t *testing.T) {
		got := sendCompleted(t, brokers, cat)
		for _, c := range want {
			if got[c.DeliveryID] != 1 {
				t.Errorf("%s: %d commands, want 1", c.DeliveryID, got[c.DeliveryID])
			}
		}
		if len(got) != len(want) {
			t.Errorf("%d send.completed commands, want %d", len(got), len(want))
		}
	})
	t.Run("the open notification's state is kept, the others' tombstoned", func(t *testing.T) {
		last := map[string][]byte{}
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.CompletionState)) {
			last[string(r.Key)] = r.Value
		}
		for _, n := range ns[:3] {
			if v, ok := last[n.id]; ok && v != nil {
				t.Errorf("notification %s's state is not tombstoned", n.id)
			}
		}
		if last[ns[3].id] == nil {
			t.Error("the open notification has no state")
		}
	})
}

// TestEachNotificationRaisesOneSendCompletedThroughSIGKILLs: two
// `herald sink --channel webhook` processes (table, fan-out, decisions
// forwarder, completion stage, sink) over 60 notifications of one to
// three deliveries, their decisions and outcomes produced in random
// order while the processes are SIGKILLed at random and the receiver
// resets 2 % of the requests after reading them. herald.deliveries.webhook
// holds exactly one send.completed command per notification and endpoint
// (the completion stage's exactly-once), every one reached its endpoint
// with the notification's webhook-id, more than once only if an attempt is
// audited ambiguous; none for the ten notifications left open.
func TestEachNotificationRaisesOneSendCompletedThroughSIGKILLs(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 4)
	em, err := emulator.Start(emulator.Options{Latency: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	em.SetFaults(emulator.Faults{ResetRate: 0.02})
	var eps []schemas.Webhook
	recs := map[string]schemas.Record{}
	for i := range 2 {
		ep := endpoint(fmt.Sprint("ep", i), em.EndpointURL(fmt.Sprint("ep", i)), schemas.EventSendCompleted)
		em.AddSecret(ep.Secret)
		eps = append(eps, ep)
	}
	for i := range eps {
		recs[webhook.Key(eps[i].Tenant, eps[i].ID)] = &eps[i]
	}
	produce(t, brokers, cat, topics.Webhooks, recs)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	channels := []string{"apns/phone", "fcm/pixel", "webpush/browser", "feed/feed"}
	var inputs []*kgo.Record
	var want []*schemas.DeliveryCommand
	var open []notification
	for i := range 70 {
		k := 1 + rng.IntN(3)
		ds := channels[:k]
		var still map[string]bool
		if i%7 == 0 { // ten notifications keep a delivery open
			still = map[string]bool{ds[k-1]: true}
		}
		n := newNotification(i, "acme", ds, still)
		inputs = append(inputs, n.records(cat, rng.Perm(len(n.outcomes)+1))...)
		cmds := n.expected(eps)
		if still != nil {
			open = append(open, n)
			if cmds != nil {
				t.Fatal("an open notification completed")
			}
		}
		want = append(want, cmds...)
	}
	// Records of different notifications interleave as a busy cluster's would.
	rng.Shuffle(len(inputs), func(i, j int) { inputs[i], inputs[j] = inputs[j], inputs[i] })
	if len(want) != 120 {
		t.Fatalf("%d send.completed deliveries expected, want 120", len(want))
	}
	ids := make([]string, len(want))
	for i, c := range want {
		ids[i] = c.DeliveryID
	}
	a := sinktest.Crash{Channel: "webhook", Args: []string{"--webhook-allow-private"}, Inputs: inputs, Await: ids, Kills: 6}.Run(t, brokers, cat)

	t.Run("herald.deliveries.webhook holds each notification's send.completed once per endpoint", func(t *testing.T) {
		got := sendCompleted(t, brokers, cat)
		for _, c := range want {
			if got[c.DeliveryID] != 1 {
				t.Errorf("%s (notification %s to %s): %d commands, want exactly 1", c.DeliveryID, c.NotificationID, c.DeviceID, got[c.DeliveryID])
			}
		}
		if len(got) != len(want) {
			t.Errorf("%d send.completed commands, want %d (none for the %d open notifications)", len(got), len(want), len(open))
		}
	})
	t.Run("each reached its endpoint with the notification's webhook-id, twice only if audited ambiguous", func(t *testing.T) {
		byMessage := map[string]string{}
		for _, c := range want {
			byMessage[c.DeviceID+" "+c.CollapseID] = c.DeliveryID
		}
		arrivals := map[string]int{}
		for _, m := range em.Received() {
			id, ok := byMessage[m.Endpoint+" "+m.ID]
			if !ok {
				t.Errorf("%s received webhook-id %s, which no expected event carries", m.Endpoint, m.ID)
				continue
			}
			if !m.Verified {
				t.Errorf("%s at %s did not verify: %s", m.ID, m.Endpoint, m.VerifyError)
			}
			arrivals[id]++
		}
		twice := sinktest.CheckOnce(t, a, want, arrivals)
		t.Logf("%d messages read, %d events arrived more than once (all audited ambiguous)", em.Total(), twice)
	})
}
