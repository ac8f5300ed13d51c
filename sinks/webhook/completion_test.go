package webhook_test

import (
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/webhook"
	"github.com/heraldhq/herald/topics"
)

const nid = "52f364d9288c640b306b566e509104bd"

// routeDecision is the route stage's decision about nid, listing
// deliveries "channel/device".
func routeDecision(outcome string, deliveries ...string) *schemas.Decision {
	d := &schemas.Decision{DecisionID: "route/herald.accepted/0/7", Stage: "route", Outcome: outcome, Tenant: "acme", Type: "invoice.paid",
		Recipient: "u1", NotificationID: nid, At: 1000}
	for _, cd := range deliveries {
		ch, dev, _ := strings.Cut(cd, "/")
		d.Deliveries = append(d.Deliveries, schemas.DecisionDelivery{DeliveryID: identity.DeliveryID(nid, dev), Channel: ch, DeviceID: dev, State: schemas.DeliveryQueued})
	}
	return d
}

// withFallback adds deliveries "channel/device" of a later step of the
// type's fallback chain to a route decision.
func withFallback(d *schemas.Decision, deliveries ...string) *schemas.Decision {
	for _, cd := range deliveries {
		ch, dev, _ := strings.Cut(cd, "/")
		d.Deliveries = append(d.Deliveries, schemas.DecisionDelivery{DeliveryID: identity.DeliveryID(nid, dev), Channel: ch, DeviceID: dev, State: schemas.DeliveryFallback})
	}
	return d
}

func deliveryOutcome(ch, dev, status string, at int64) *schemas.Outcome {
	return &schemas.Outcome{DeliveryID: identity.DeliveryID(nid, dev), NotificationID: nid, Tenant: "acme", Type: "invoice.paid", Recipient: "u1",
		DeviceID: dev, Channel: ch, Status: status, Attempts: 1, At: at}
}

// step is one record the completion stage reads: a decision or an outcome.
type step struct {
	d *schemas.Decision
	o *schemas.Outcome
}

func TestANotificationCompletesOnceEveryDeliveryOfItEnded(t *testing.T) {
	optedOutFCM := routeDecision(schemas.DecisionOptedOut)
	optedOutFCM.Channel, optedOutFCM.DecisionID = "fcm", optedOutFCM.DecisionID+"/fcm"
	release := &schemas.Decision{DecisionID: "route/release/deferred/acme/u1/" + nid + "/1000", Stage: "route", Outcome: schemas.DecisionRouted,
		Tenant: "acme", Type: "invoice.paid", Recipient: "u1", NotificationID: nid, At: 5000}
	dedupe := routeDecision(schemas.DecisionAccepted)
	dedupe.Stage = "dedupe"
	webhookOutcome := deliveryOutcome("webhook", "ep1", schemas.OutcomeDelivered, 2500)

	cases := []struct {
		name  string
		steps []step
		// completeAt is the index of the step after which the entry is
		// complete (-1: never).
		completeAt int
		status     string
		channels   map[string]map[string]int
	}{
		{name: "a routed notification completes with its last outcome",
			steps: []step{{d: routeDecision(schemas.DecisionRouted, "apns/phone", "feed/feed")},
				{o: deliveryOutcome("apns", "phone", schemas.OutcomeDelivered, 2000)}, {o: deliveryOutcome("feed", "feed", schemas.OutcomeDelivered, 1500)}},
			completeAt: 2, status: webhook.CompletedDelivered, channels: map[string]map[string]int{"apns": {"delivered": 1}, "feed": {"delivered": 1}}},
		{name: "outcomes read before the decision complete it when the decision comes",
			steps: []step{{o: deliveryOutcome("apns", "phone", schemas.OutcomeFailed, 2000)}, {o: deliveryOutcome("fcm", "pixel", schemas.OutcomeDelivered, 2100)},
				{d: routeDecision(schemas.DecisionRouted, "apns/phone", "fcm/pixel")}},
			completeAt: 2, status: webhook.CompletedPartial, channels: map[string]map[string]int{"apns": {"failed": 1}, "fcm": {"delivered": 1}}},
		{name: "a notification none of whose deliveries succeeded is failed",
			steps: []step{{d: routeDecision(schemas.DecisionRouted, "apns/phone", "webpush/browser")},
				{o: deliveryOutcome("apns", "phone", schemas.OutcomeDeviceRetired, 2000)}, {o: deliveryOutcome("webpush", "browser", schemas.OutcomeDeadLettered, 2000)}},
			completeAt: 2, status: webhook.CompletedFailed, channels: map[string]map[string]int{"apns": {"device_retired": 1}, "webpush": {"dead_lettered": 1}}},
		{name: "a rate-limited notification completes skipped at its decision",
			steps: []step{{d: routeDecision(schemas.DecisionRateLimited)}}, completeAt: 0, status: webhook.CompletedSkipped, channels: map[string]map[string]int{}},
		{name: "an opted-out channel is counted skipped beside the others",
			steps:      []step{{d: optedOutFCM}, {d: routeDecision(schemas.DecisionRouted, "feed/feed")}, {o: deliveryOutcome("feed", "feed", schemas.OutcomeDelivered, 1200)}},
			completeAt: 2, status: webhook.CompletedDelivered, channels: map[string]map[string]int{"fcm": {"skipped": 1}, "feed": {"delivered": 1}}},
		{name: "a deferred push completes once its sink ends it; the release at the end of quiet hours adds nothing",
			steps: []step{{d: routeDecision(schemas.DecisionDeferred, "apns/phone", "feed/feed")}, {o: deliveryOutcome("feed", "feed", schemas.OutcomeDelivered, 1100)},
				{d: release}, {o: deliveryOutcome("apns", "phone", schemas.OutcomeDelivered, 5100)}},
			completeAt: 3, status: webhook.CompletedDelivered, channels: map[string]map[string]int{"apns": {"delivered": 1}, "feed": {"delivered": 1}}},
		{name: "a second outcome of one delivery changes nothing",
			steps: []step{{d: routeDecision(schemas.DecisionRouted, "apns/phone", "fcm/pixel")}, {o: deliveryOutcome("apns", "phone", schemas.OutcomeDelivered, 2000)},
				{o: deliveryOutcome("apns", "phone", schemas.OutcomeFailed, 2500)}, {o: deliveryOutcome("fcm", "pixel", schemas.OutcomeDelivered, 2600)}},
			completeAt: 3, status: webhook.CompletedDelivered, channels: map[string]map[string]int{"apns": {"delivered": 1}, "fcm": {"delivered": 1}}},
		{name: "the dedupe stage's decisions and webhook outcomes do not count",
			steps: []step{{d: dedupe}, {o: webhookOutcome}, {d: routeDecision(schemas.DecisionRouted, "feed/feed")}, {o: webhookOutcome},
				{o: deliveryOutcome("feed", "feed", schemas.OutcomeExpired, 1300)}},
			completeAt: 4, status: webhook.CompletedFailed, channels: map[string]map[string]int{"feed": {"expired": 1}}},
		{name: "a later step of a fallback chain is not waited for: it is sent only if its condition holds",
			steps: []step{{d: withFallback(routeDecision(schemas.DecisionRouted, "apns/phone"), "email/inbox")},
				{o: deliveryOutcome("apns", "phone", schemas.OutcomeDelivered, 2000)}},
			completeAt: 1, status: webhook.CompletedDelivered, channels: map[string]map[string]int{"apns": {"delivered": 1}}},
		{name: "outcomes without a decision never complete",
			steps:      []step{{o: deliveryOutcome("apns", "phone", schemas.OutcomeDelivered, 2000)}},
			completeAt: -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e *schemas.Completion
			for i, s := range c.steps {
				if s.d != nil {
					e, _ = webhook.ApplyDecision(e, s.d, int64(i))
				} else {
					e, _ = webhook.ApplyOutcome(e, s.o, int64(i))
				}
				want := c.completeAt >= 0 && i >= c.completeAt
				if got := webhook.Complete(e); got != want {
					t.Fatalf("after step %d complete = %v, want %v (entry %+v)", i, got, want, e)
				}
				if want {
					break
				}
			}
			if c.completeAt < 0 {
				return
			}
			data := webhook.Completed(e)
			if data.Status != c.status || !reflect.DeepEqual(data.Channels, c.channels) {
				t.Fatalf("status %s channels %v, want %s %v", data.Status, data.Channels, c.status, c.channels)
			}
			if data.EventID != identity.WebhookEventID(nid, schemas.EventSendCompleted) || data.NotificationID != nid {
				t.Fatalf("event id %s of %s, want the notification's", data.EventID, data.NotificationID)
			}
		})
	}
}

func TestTheSendCompletedDeliveriesGoToTheSubscribedEndpointsWithTheNotificationsWebhookID(t *testing.T) {
	var e *schemas.Completion
	e, _ = webhook.ApplyDecision(e, routeDecision(schemas.DecisionRouted, "apns/phone"), 1)
	e, _ = webhook.ApplyOutcome(e, deliveryOutcome("apns", "phone", schemas.OutcomeDelivered, 2000), 2)
	on := func(id string, events ...string) schemas.Webhook { return endpoint(id, "https://x/"+id, events...) }
	late := on("late", schemas.EventSendCompleted)
	late.CreatedAt = 2001
	off := on("off", schemas.EventSendCompleted)
	off.Enabled = false
	other := on("other", schemas.EventSendCompleted)
	other.Tenant = "globex"
	eps := []schemas.Webhook{on("a", schemas.EventSendCompleted, schemas.EventDeliveryFailed), on("b", schemas.EventDeliveryCompleted), late, off, other,
		on("c", schemas.EventSendCompleted)}

	cmds := webhook.CompletionCommands(e, eps)
	again := webhook.CompletionCommands(e, eps)
	want := "msg_" + identity.WebhookEventID(nid, schemas.EventSendCompleted)
	if len(cmds) != 2 || cmds[0].DeviceID != "a" || cmds[1].DeviceID != "c" {
		t.Fatalf("commands to %v, want a and c", cmds)
	}
	for i, c := range cmds {
		t.Run("the command to "+c.DeviceID+" carries the notification's webhook-id and the same bytes every time", func(t *testing.T) {
			if c.CollapseID != want || c.Channel != webhook.Channel || c.DeliveryID != identity.DeliveryID(want[4:], c.DeviceID) {
				t.Fatalf("command %+v, want webhook-id %s", c, want)
			}
			if string(again[i].Payload) != string(c.Payload) || again[i].DeliveryID != c.DeliveryID {
				t.Fatal("the same entry gave other bytes")
			}
			var ev webhook.CompletionEvent
			if err := json.Unmarshal(c.Payload, &ev); err != nil || ev.Type != schemas.EventSendCompleted || ev.Data.Status != webhook.CompletedDelivered ||
				len(ev.Data.Deliveries) != 1 || ev.Data.CompletedAt != 2000 || ev.Timestamp != "1970-01-01T00:00:02.000Z" {
				t.Fatalf("body %s (%v)", c.Payload, err)
			}
		})
	}
}

// completionRecord is a decision or outcome as the forwarders write it to
// herald.completions.
func completionRecord(t *testing.T, v schemas.Record, at int64) *kgo.Record {
	t.Helper()
	b, err := schemas.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: "herald.completions", Key: []byte(nid), Value: b, Partition: 2, Timestamp: time.UnixMilli(at),
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(v.SchemaName())}}}
}

// TestTheCompletionTaskKeepsOpenNotificationsInItsChangelog: the task's
// transactions as the stage runtime drives them, without a broker. An
// open notification's entry goes to herald.completionstate on the input's
// partition; an aborted transaction leaves the committed state; a
// restored task completes the notification; the completing transaction
// writes the commands and the tombstone; an entry open longer than
// MaxOpen is tombstoned by Tick without an event.
func TestTheCompletionTaskKeepsOpenNotificationsInItsChangelog(t *testing.T) {
	tbl := webhook.NewTable("herald.webhooks")
	tbl.Put(endpoint("a", "https://x/a", schemas.EventSendCompleted))
	clock := time.UnixMilli(10_000)
	o := webhook.CompletionOptions{Catalog: topics.New(topics.Options{}), Table: tbl, MaxOpen: time.Hour, Now: func() time.Time { return clock }}
	task := webhook.NewCompletionTask(o, 2)
	process := func(task *webhook.CompletionTask, v schemas.Record) []*kgo.Record {
		t.Helper()
		var out stage.Out
		if err := task.Process(completionRecord(t, v, 10_000), &out); err != nil {
			t.Fatal(err)
		}
		return out.Records()
	}

	var changelog []*kgo.Record
	t.Run("an open notification's entry is written to the changelog on the input's partition", func(t *testing.T) {
		recs := process(task, routeDecision(schemas.DecisionRouted, "apns/phone", "feed/feed"))
		if len(recs) != 1 || recs[0].Topic != "herald.completionstate" || recs[0].Partition != 2 || string(recs[0].Key) != nid || recs[0].Value == nil {
			t.Fatalf("records %+v, want the entry", recs)
		}
		task.Commit()
		changelog = append(changelog, recs...)
	})
	t.Run("an aborted transaction leaves the committed entry", func(t *testing.T) {
		process(task, deliveryOutcome("apns", "phone", schemas.OutcomeDelivered, 10_000))
		task.Abort()
		recs := process(task, deliveryOutcome("apns", "phone", schemas.OutcomeDelivered, 10_000))
		if len(recs) != 1 || recs[0].Value == nil {
			t.Fatalf("records %+v, want the entry with one delivery open", recs)
		}
		task.Commit()
		changelog = append(changelog, recs...)
	})
	restored := webhook.NewCompletionTask(o, 2)
	for _, r := range changelog {
		if err := restored.Restore(r); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a task restored from the changelog completes the notification with the event and a tombstone", func(t *testing.T) {
		recs := process(restored, deliveryOutcome("feed", "feed", schemas.OutcomeDelivered, 10_000))
		if len(recs) != 2 || recs[0].Topic != "herald.deliveries.webhook" || recs[1].Topic != "herald.completionstate" || recs[1].Value != nil {
			t.Fatalf("records %+v, want the send.completed command and the tombstone", recs)
		}
		var c schemas.DeliveryCommand
		if err := schemas.Decode(recs[0].Value, &c); err != nil || c.CollapseID != "msg_"+identity.WebhookEventID(nid, schemas.EventSendCompleted) {
			t.Fatalf("command %+v (%v)", c, err)
		}
		var ev webhook.CompletionEvent
		if err := json.Unmarshal(c.Payload, &ev); err != nil || ev.Data.Status != webhook.CompletedDelivered || len(ev.Data.Deliveries) != 2 {
			t.Fatalf("body %s (%v): the restored entry lost a delivery", c.Payload, err)
		}
		restored.Commit()
		if restored.Len() != 0 {
			t.Fatalf("%d entries left", restored.Len())
		}
	})
	t.Run("an entry open longer than MaxOpen is tombstoned without an event", func(t *testing.T) {
		process(restored, deliveryOutcome("apns", "phone", schemas.OutcomeDelivered, 10_000))
		restored.Commit()
		var out stage.Out
		restored.Tick(&out)
		if out.Len() != 0 {
			t.Fatalf("records %+v before MaxOpen", out.Records())
		}
		clock = clock.Add(time.Hour + time.Minute)
		restored.Tick(&out)
		if r := out.Records(); len(r) != 1 || r[0].Value != nil || r[0].Topic != "herald.completionstate" {
			t.Fatalf("records %+v, want one tombstone", r)
		}
		restored.Commit()
		if restored.Len() != 0 {
			t.Fatalf("%d entries left", restored.Len())
		}
	})
}

// TestEachOccurrenceOfANotificationHasItsOwnSendCompleted: a dedupe key
// accepted again after its window is a new occurrence of the same
// notification, sent again: its records gather under its own key and its
// event has its own webhook-id, derived from the occurrence; a
// notification accepted before occurrences existed keeps the one derived
// from its notification id.
func TestEachOccurrenceOfANotificationHasItsOwnSendCompleted(t *testing.T) {
	ep := endpoint("a", "https://x/a", schemas.EventSendCompleted)
	eventOf := func(occurrence string) (*schemas.DeliveryCommand, string) {
		d := routeDecision(schemas.DecisionRouted, "feed/feed")
		d.OccurrenceID = occurrence
		o := deliveryOutcome("feed", "feed", schemas.OutcomeDelivered, 2000)
		o.OccurrenceID = occurrence
		var e *schemas.Completion
		e, _ = webhook.ApplyDecision(e, d, 1)
		e, _ = webhook.ApplyOutcome(e, o, 2)
		cmds := webhook.CompletionCommands(e, []schemas.Webhook{ep})
		if len(cmds) != 1 {
			t.Fatalf("%d commands, want 1", len(cmds))
		}
		return cmds[0], schemas.Occurrence(e.NotificationID, e.OccurrenceID)
	}
	first, second := identity.OccurrenceID(nid, 1_000), identity.OccurrenceID(nid, 90_000_000)
	a, keyA := eventOf(first)
	b, keyB := eventOf(second)
	legacy, keyL := eventOf("")
	if keyA != first || keyB != second || keyL != nid {
		t.Fatalf("keys %s, %s, %s; want the occurrences and, for the legacy record, the notification id", keyA, keyB, keyL)
	}
	if a.CollapseID != "msg_"+identity.WebhookEventID(first, schemas.EventSendCompleted) || b.CollapseID == a.CollapseID || a.DeliveryID == b.DeliveryID {
		t.Fatalf("webhook-ids %s and %s, want one per occurrence", a.CollapseID, b.CollapseID)
	}
	if legacy.CollapseID != "msg_"+identity.WebhookEventID(nid, schemas.EventSendCompleted) {
		t.Fatalf("legacy webhook-id %s, want the notification id's", legacy.CollapseID)
	}
	var ev webhook.CompletionEvent
	if err := json.Unmarshal(b.Payload, &ev); err != nil || ev.Data.NotificationID != nid || ev.Data.OccurrenceID != second {
		t.Fatalf("body %s (%v), want the notification and the second occurrence", b.Payload, err)
	}
}

// TestTheCompletionTaskSweepsOnceAMinuteDroppingEntriesOpenLongerThanMaxOpen:
// with the default MaxOpen (7 days), a sweep comes at most once a minute
// and drops, logged, each committed entry whose first record is older than
// MaxOpen (one exactly MaxOpen old stays); a sweep that drops nothing logs
// nothing; a notification that completes with its first record leaves no
// state to tombstone.
func TestTheCompletionTaskSweepsOnceAMinuteDroppingEntriesOpenLongerThanMaxOpen(t *testing.T) {
	tbl := webhook.NewTable("herald.webhooks")
	tbl.Put(endpoint("a", "https://x/a", schemas.EventSendCompleted))
	const week = 7 * 24 * time.Hour
	t0 := time.UnixMilli(2_000_000_000_000)
	clock := t0
	logs := newLogRecorder()
	task := webhook.NewCompletionTask(webhook.CompletionOptions{Catalog: topics.New(topics.Options{}), Table: tbl, Instance: stage.Instance{Logger: slog.New(logs)},
		Now: func() time.Time { return clock }}, 1)
	open := func(id string, first time.Time) {
		t.Helper()
		d := routeDecision(schemas.DecisionRouted, "apns/phone")
		d.NotificationID = id
		r := record(t, "herald.completions", id, d, true)
		r.Partition, r.Timestamp = 1, first
		var out stage.Out
		if err := task.Process(r, &out); err != nil || out.Len() != 1 {
			t.Fatalf("process: %v, %d records", err, out.Len())
		}
	}
	dropsAt := strings.Repeat("a", 32) // open one millisecond short of MaxOpen at the second sweep
	staysAt := strings.Repeat("b", 32) // open exactly MaxOpen at the second sweep
	open(dropsAt, t0.Add(-week+time.Minute-time.Millisecond))
	open(staysAt, t0.Add(-week+time.Minute))
	task.Commit()
	tick := func() []*kgo.Record {
		var out stage.Out
		task.Tick(&out)
		task.Commit()
		return out.Records()
	}

	t.Run("the first sweep drops nothing and logs nothing", func(t *testing.T) {
		if recs := tick(); len(recs) != 0 || logs.has("dropped") {
			t.Fatalf("records %+v, want none and no log", recs)
		}
	})
	t.Run("a sweep a minute later drops the entry older than MaxOpen only, logged", func(t *testing.T) {
		clock = t0.Add(time.Minute)
		recs := tick()
		if len(recs) != 1 || string(recs[0].Key) != dropsAt || recs[0].Value != nil || recs[0].Partition != 1 {
			t.Fatalf("records %+v, want the tombstone of %s", recs, dropsAt)
		}
		if !logs.has("dropped notifications whose deliveries never all ended", "count=1", "partition=1", "stage=webhook-completion") {
			t.Fatal("the drop was not logged with its count")
		}
		if task.Len() != 1 {
			t.Fatalf("%d entries, want the one exactly MaxOpen old", task.Len())
		}
	})
	t.Run("no sweep within a minute of the last one", func(t *testing.T) {
		clock = t0.Add(2*time.Minute - time.Millisecond)
		if recs := tick(); len(recs) != 0 {
			t.Fatalf("records %+v within a minute of the last sweep", recs)
		}
		clock = t0.Add(2 * time.Minute)
		if recs := tick(); len(recs) != 1 || string(recs[0].Key) != staysAt {
			t.Fatalf("records %+v, want the tombstone of %s a minute after the last sweep", recs, staysAt)
		}
	})
	t.Run("a notification complete at its first record writes its event and no state", func(t *testing.T) {
		d := routeDecision(schemas.DecisionRateLimited)
		r := record(t, "herald.completions", nid, d, true)
		r.Partition, r.Timestamp = 1, clock
		var out stage.Out
		if err := task.Process(r, &out); err != nil {
			t.Fatal(err)
		}
		if recs := out.Records(); len(recs) != 1 || recs[0].Topic != "herald.deliveries.webhook" {
			t.Fatalf("records %+v, want the send.completed command only", recs)
		}
	})
}
