package fallback_test

import (
	"strings"
	"testing"

	"github.com/heraldhq/herald/processors/fallback"
	"github.com/heraldhq/herald/schemas"
)

const min15 = 15 * 60_000

// plan is a two- or three-step plan started at 1000: step 1 delivered to
// first, step 2 (email) with cond, step 3 (feed) with no condition when
// feed is set.
func plan(first []string, cond schemas.FallbackStep, feed bool) schemas.Fallback {
	p := schemas.Fallback{NotificationID: "n1", Tenant: "acme", Type: "invoice.paid", Recipient: "u1", PlannedAt: 1000, FirstAt: 1000,
		Steps: []schemas.FallbackStep{{Channels: []string{"apns"}, Deliveries: first, State: schemas.FallbackFired, At: 1000}}}
	cond.Channels = []string{"email"}
	cond.Deliveries = []string{"mail"}
	cond.Commands = []schemas.DeliveryCommand{{DeliveryID: "mail", Channel: "email", CreatedAt: 1000}}
	p.Steps = append(p.Steps, cond)
	if feed {
		p.Steps = append(p.Steps, schemas.FallbackStep{Channels: []string{"feed"}, Deliveries: []string{"feed"},
			Commands: []schemas.DeliveryCommand{{DeliveryID: "feed", Channel: "feed"}}})
	}
	return p
}

func outcome(id, status string, at int64) schemas.FallbackOutcome {
	return schemas.FallbackOutcome{DeliveryID: id, Status: status, At: at}
}

func TestDecide(t *testing.T) {
	ifFailed := schemas.FallbackStep{IfFailed: true}
	after := schemas.FallbackStep{AfterMs: min15, Unless: []string{schemas.ReceiptDisplayed, schemas.ReceiptOpened}}
	type want struct {
		states []string // of the steps after the first
		at     []int64
		reason string // part of the last change's reason
		wake   int64
		done   bool
	}
	cases := []struct {
		name string
		e    schemas.Fallback
		now  int64
		want want
	}{
		{"an if-failed step fires when every delivery of the step before ended undelivered, at the last outcome",
			with(plan([]string{"p1", "p2"}, ifFailed, false), outs(outcome("p1", schemas.OutcomeDeviceRetired, 1200), outcome("p2", schemas.OutcomeFailed, 1500)), nil),
			1500, want{states: []string{"fired"}, at: []int64{1500}, reason: "device_retired, failed", done: true}},
		{"an if-failed step waits while a delivery of the step before is open",
			with(plan([]string{"p1", "p2"}, ifFailed, false), outs(outcome("p1", schemas.OutcomeDeviceRetired, 1200)), nil),
			99999, want{states: []string{""}}},
		{"an if-failed step is cancelled by one delivered outcome",
			with(plan([]string{"p1", "p2"}, ifFailed, false), outs(outcome("p1", schemas.OutcomeDeviceRetired, 1200), outcome("p2", schemas.OutcomeDelivered, 1300)), nil),
			1300, want{states: []string{"cancelled"}, at: []int64{1300}, reason: "delivery p2 was delivered", done: true}},
		{"a step fires at once when the step before made no delivery, whatever its delay",
			plan(nil, after, false), 1000, want{states: []string{"fired"}, at: []int64{1000}, reason: "made no delivery", done: true}},
		{"a delayed step waits for its time and says when",
			plan([]string{"p1"}, after, false), 1000 + min15 - 1, want{states: []string{""}, wake: 1000 + min15}},
		{"a delayed step fires at its time, stamped with it however late the clock",
			plan([]string{"p1"}, after, false), 1000 + min15 + 5000, want{states: []string{"fired"}, at: []int64{1000 + min15}, reason: "15m0s passed", done: true}},
		{"a displayed receipt before the step's time cancels it",
			with(plan([]string{"p1"}, after, false), nil, recs(schemas.FallbackReceipt{DeliveryID: "p1", Kind: schemas.ReceiptDisplayed, At: 2000})),
			2000, want{states: []string{"cancelled"}, at: []int64{2000}, reason: "displayed receipt of delivery p1", done: true}},
		{"a receipt at or after the step's time does not cancel it: the step was due first",
			with(plan([]string{"p1"}, after, false), nil, recs(schemas.FallbackReceipt{DeliveryID: "p1", Kind: schemas.ReceiptOpened, At: 1000 + min15})),
			1000 + min15, want{states: []string{"fired"}, at: []int64{1000 + min15}, done: true}},
		{"a receipt of a kind the step does not name does not cancel it",
			with(plan([]string{"p1"}, schemas.FallbackStep{AfterMs: min15, Unless: []string{schemas.ReceiptOpened}}, false), nil,
				recs(schemas.FallbackReceipt{DeliveryID: "p1", Kind: schemas.ReceiptDisplayed, At: 2000})),
			1000 + min15, want{states: []string{"fired"}, at: []int64{1000 + min15}, done: true}},
		{"a receipt of a delivery the plan does not list does not cancel",
			with(plan([]string{"p1"}, after, false), nil, recs(schemas.FallbackReceipt{DeliveryID: "other", Kind: schemas.ReceiptDisplayed, At: 2000})),
			1000 + min15, want{states: []string{"fired"}, at: []int64{1000 + min15}, done: true}},
		{"a step with no condition fires with the step before it",
			with(plan([]string{"p1"}, ifFailed, true), outs(outcome("p1", schemas.OutcomeFailed, 1100)), nil),
			1100, want{states: []string{"fired", "fired"}, at: []int64{1100, 1100}, reason: "fires with step 2", done: true}},
		{"a cancelled step cancels every step after it",
			with(plan([]string{"p1"}, ifFailed, true), outs(outcome("p1", schemas.OutcomeDelivered, 1100)), nil),
			1100, want{states: []string{"cancelled", "cancelled"}, at: []int64{1100, 1100}, reason: "step 2 was cancelled", done: true}},
		{"an entry whose plan has not been read decides nothing",
			schemas.Fallback{NotificationID: "n1", Outcomes: []schemas.FallbackOutcome{outcome("p1", schemas.OutcomeFailed, 1)}}, 99999, want{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, changes, wake := fallback.Decide(c.e, c.now)
			for i, s := range c.want.states {
				if st := got.Steps[i+1].State; st != s {
					t.Fatalf("step %d is %q, want %q (changes %+v)", i+2, st, s, changes)
				}
				if s != "" && got.Steps[i+1].Commands != nil {
					t.Errorf("settled step %d still keeps its commands", i+2)
				}
				if s != "" && got.Steps[i+1].At != c.want.at[i] {
					t.Errorf("step %d changed at %d, want %d", i+2, got.Steps[i+1].At, c.want.at[i])
				}
			}
			if n := countSettled(c.want.states); len(changes) != n {
				t.Fatalf("%d changes, want %d: %+v", len(changes), n, changes)
			}
			if c.want.reason != "" && !strings.Contains(changes[len(changes)-1].Reason, c.want.reason) {
				t.Errorf("reason %q, want it to say %q", changes[len(changes)-1].Reason, c.want.reason)
			}
			if wake != c.want.wake {
				t.Errorf("wake %d, want %d", wake, c.want.wake)
			}
			if got.Done != c.want.done {
				t.Errorf("done %v, want %v", got.Done, c.want.done)
			}
			for _, ch := range changes {
				if ch.State == schemas.FallbackFired && (len(ch.Commands) == 0 || ch.Commands[0].CreatedAt != ch.At) {
					t.Errorf("a fired step's commands %+v are not stamped with its time %d", ch.Commands, ch.At)
				}
				if ch.State == schemas.FallbackCancelled && len(ch.Commands) > 0 {
					t.Errorf("a cancelled step sends %+v", ch.Commands)
				}
			}
			if len(c.e.Steps) > 1 && c.e.Steps[1].State != "" {
				t.Error("Decide changed the entry it was given")
			}
		})
	}
}

func TestAStepFiresAtMostOnce(t *testing.T) {
	e := with(plan([]string{"p1"}, schemas.FallbackStep{IfFailed: true}, false), outs(outcome("p1", schemas.OutcomeFailed, 1100)), nil)
	e, first, _ := fallback.Decide(e, 1100)
	if len(first) != 1 {
		t.Fatalf("first decision: %+v", first)
	}
	e = fallback.ApplyOutcome(&e, schemas.Outcome{DeliveryID: "p1", NotificationID: "n1", Status: schemas.OutcomeDelivered, At: 1200}, 1200)
	e = fallback.ApplyReceipt(&e, schemas.Receipt{DeliveryID: "p1", NotificationID: "n1", Kind: schemas.ReceiptOpened, At: 1300}, 1300)
	if _, again, _ := fallback.Decide(e, 99999); len(again) != 0 {
		t.Fatalf("a fired step changed again: %+v", again)
	}
}

func TestOutcomesAndReceiptsReadBeforeThePlanCount(t *testing.T) {
	var e *schemas.Fallback
	n := fallback.ApplyOutcome(e, schemas.Outcome{DeliveryID: "p1", NotificationID: "n1", Status: schemas.OutcomeDeviceRetired, At: 1100}, 1100)
	n = fallback.ApplyOutcome(&n, schemas.Outcome{DeliveryID: "elsewhere", NotificationID: "n1", Status: schemas.OutcomeDelivered, At: 1100}, 1100)
	n, cancelled := fallback.ApplyPlan(&n, plan([]string{"p1"}, schemas.FallbackStep{IfFailed: true}, false), 1200)
	if len(cancelled) != 0 || len(n.Outcomes) != 1 || n.FirstAt != 1100 {
		t.Fatalf("entry %+v, cancelled %+v: want the plan's outcome kept, the other dropped, FirstAt kept", n, cancelled)
	}
	if _, changes, _ := fallback.Decide(n, 1200); len(changes) != 1 || changes[0].State != schemas.FallbackFired || changes[0].At != 1100 {
		t.Fatalf("changes %+v, want step 2 fired at the outcome's time", changes)
	}
}

func TestANewOccurrencesPlanCancelsTheOldOnesPendingSteps(t *testing.T) {
	old := plan([]string{"p1"}, schemas.FallbackStep{AfterMs: min15}, false)
	old.OccurrenceID = "o1"
	next := plan([]string{"q1"}, schemas.FallbackStep{AfterMs: min15}, false)
	next.OccurrenceID = "o2"
	n, cancelled := fallback.ApplyPlan(&old, next, 5000)
	if len(cancelled) != 1 || !strings.Contains(cancelled[0].Reason, "superseded by occurrence o2") {
		t.Fatalf("cancelled %+v", cancelled)
	}
	if n.OccurrenceID != "o2" || n.Steps[1].State != "" {
		t.Fatalf("entry %+v: want the new plan, pending", n)
	}
	if again, c := fallback.ApplyPlan(&n, next, 6000); len(c) != 0 || again.FirstAt != n.FirstAt {
		t.Fatalf("a repeat of the plan changed the entry: %+v %+v", again, c)
	}
}

func TestADecisionNamesTheStepAndTheReason(t *testing.T) {
	e := plan(nil, schemas.FallbackStep{IfFailed: true}, false)
	e.OccurrenceID = "o1"
	e, changes, _ := fallback.Decide(e, 1000)
	d := fallback.Decision(e, changes[0], "herald.fallback", 2, 7)
	if d.Stage != "fallback" || d.Outcome != schemas.DecisionFallback || d.DecisionID != "fallback/o1/2" ||
		!strings.HasPrefix(d.Detail, "step 2 (email if failed) fired: ") || len(d.Deliveries) != 1 || d.Deliveries[0].DeliveryID != "mail" {
		t.Fatalf("decision %+v", d)
	}
}

func with(e schemas.Fallback, o []schemas.FallbackOutcome, r []schemas.FallbackReceipt) schemas.Fallback {
	e.Outcomes, e.Receipts = o, r
	return e
}

func outs(o ...schemas.FallbackOutcome) []schemas.FallbackOutcome { return o }
func recs(r ...schemas.FallbackReceipt) []schemas.FallbackReceipt { return r }

func countSettled(states []string) int {
	n := 0
	for _, s := range states {
		if s != "" {
			n++
		}
	}
	return n
}
