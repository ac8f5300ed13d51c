package fallback_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/fallback"
	"github.com/heraldhq/herald/schemas"
)

var taskTopics = fallback.Topics{Fallback: "fb", State: "fbstate", Decisions: "decisions",
	Deliveries: map[string]string{"email": "d.email", "feed": "d.feed", "apns": "d.apns"}}

// outputs splits a transaction's records: decisions, commands, and the
// changelog records (by key, the last one).
func outputs(t *testing.T, out *stage.Out) (decisions []schemas.Decision, commands int, state map[string]*kgo.Record) {
	t.Helper()
	state = map[string]*kgo.Record{}
	for _, r := range out.Records() {
		switch r.Topic {
		case taskTopics.Decisions:
			var d schemas.Decision
			if err := schemas.Decode(r.Value, &d); err != nil {
				t.Fatal(err)
			}
			decisions = append(decisions, d)
		case taskTopics.State:
			if r.Partition != 2 {
				t.Fatalf("a changelog record on partition %d, want the task's (2)", r.Partition)
			}
			state[string(r.Key)] = r
		default:
			commands++
		}
	}
	return decisions, commands, state
}

// mark is a watermark record on partition 2 of herald.fallback: both
// forwarders' topics, of one partition each, read up to at.
func mark(t *testing.T, at int64, kinds ...string) *kgo.Record {
	t.Helper()
	if len(kinds) == 0 {
		kinds = fallback.Kinds
	}
	var w schemas.FallbackWatermark
	for _, k := range kinds {
		w.Marks = append(w.Marks, schemas.FallbackMark{Kind: k, Partition: 0, Partitions: 1, At: at})
	}
	r := encoded(t, taskTopics.Fallback, "watermark/test", &w)
	r.Timestamp, r.Partition = time.UnixMilli(at), 2
	return r
}

// step processes rec (nil: none) and ticks, in one transaction, and commits it.
func step(t *testing.T, task *fallback.Task, rec *kgo.Record) *stage.Out {
	t.Helper()
	var out stage.Out
	if rec != nil {
		if err := task.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
	}
	task.Tick(&out)
	task.Commit()
	return &out
}

func TestAStepTimerIsRestoredFromTheChangelogAndFiresOnce(t *testing.T) {
	p := plan([]string{"p1"}, schemas.FallbackStep{AfterMs: min15, Unless: []string{schemas.ReceiptDisplayed}}, false)
	rec := encoded(t, taskTopics.Fallback, p.NotificationID, &p)
	rec.Timestamp, rec.Partition = time.UnixMilli(1000), 2
	a := fallback.NewTask(taskTopics, 2, 0, nil)
	out := step(t, a, mark(t, 1000))
	_, _, marks := outputs(t, out)
	ds, cmds, state := outputs(t, step(t, a, rec))
	if len(ds) != 0 || cmds != 0 || state["n1"] == nil || marks["watermarks"] == nil {
		t.Fatalf("before its time: %d decisions, %d commands, state %v, watermarks %v", len(ds), cmds, state, marks)
	}

	// A new instance restores the entry and the watermarks, and fires the
	// step when a watermark reaches the step's time, once.
	b := fallback.NewTask(taskTopics, 2, 0, nil)
	for _, r := range []*kgo.Record{marks["watermarks"], state["n1"]} {
		if err := b.Restore(r); err != nil {
			t.Fatal(err)
		}
	}
	if b.Clock() != 1000 {
		t.Fatalf("restored clock %d, want 1000", b.Clock())
	}
	if ds, _, _ := outputs(t, step(t, b, mark(t, 1000+min15-1))); len(ds) != 0 {
		t.Fatalf("fired before its time: %+v", ds)
	}
	last := mark(t, 1000+min15)
	var o stage.Out
	if err := b.Process(last, &o); err != nil {
		t.Fatal(err)
	}
	b.Tick(&o)
	ds, cmds, _ = outputs(t, &o)
	if len(ds) != 1 || ds[0].Outcome != schemas.DecisionFallback || cmds != 1 || ds[0].At != 1000+min15 || ds[0].SourceOffset != last.Offset {
		t.Fatalf("at its time: decisions %+v, %d commands; want the step fired, the watermark its source", ds, cmds)
	}

	// Aborted, the same watermark fires it again; committed, never.
	b.Abort()
	o.Reset()
	if err := b.Process(last, &o); err != nil {
		t.Fatal(err)
	}
	b.Tick(&o)
	again, cmds, state := outputs(t, &o)
	if len(again) != 1 || cmds != 1 || again[0].DecisionID != ds[0].DecisionID {
		t.Fatalf("after an abort: decisions %+v, %d commands; want the same step fired again", again, cmds)
	}
	b.Commit()
	if again, cmds, _ := outputs(t, step(t, b, mark(t, 1000+min15+60_000))); len(again) != 0 || cmds != 0 {
		t.Fatalf("after the commit: decisions %+v, %d commands; want none", again, cmds)
	}

	// A third instance restored from the committed entry fires nothing.
	var e schemas.Fallback
	if err := schemas.Decode(state["n1"].Value, &e); err != nil || e.Steps[1].State != schemas.FallbackFired || !e.Done {
		t.Fatalf("the committed entry %+v (%v): want the step fired, done", e, err)
	}
	c := fallback.NewTask(taskTopics, 2, 0, nil)
	for _, r := range []*kgo.Record{state["watermarks"], state["n1"]} {
		if err := c.Restore(r); err != nil {
			t.Fatal(err)
		}
	}
	if again, cmds, _ := outputs(t, step(t, c, nil)); len(again) != 0 || cmds != 0 {
		t.Fatalf("restored after the fire: decisions %+v, %d commands", again, cmds)
	}
}

func TestStepsFireOnTheWatermarksNeverOnRecordTimes(t *testing.T) {
	p := plan([]string{"p1"}, schemas.FallbackStep{AfterMs: min15, Unless: []string{schemas.ReceiptDisplayed}}, false)
	planRec := encoded(t, taskTopics.Fallback, p.NotificationID, &p)
	planRec.Timestamp, planRec.Partition = time.UnixMilli(1000), 2
	// An outcome stamped far ahead (a sink's clock): the old stream time
	// would have fired the step on it.
	late := encoded(t, taskTopics.Fallback, "n1", &schemas.Outcome{DeliveryID: "p1", NotificationID: "n1", Tenant: "acme", Type: "invoice.paid",
		Status: schemas.OutcomeDelivered, At: 1000 + 10*min15})
	late.Timestamp, late.Partition = time.UnixMilli(1000+10*min15), 2
	task := fallback.NewTask(taskTopics, 2, 0, nil)
	for _, r := range []*kgo.Record{planRec, late} {
		if ds, _, _ := outputs(t, step(t, task, r)); len(ds) != 0 {
			t.Fatalf("a step decided on a record's time: %+v", ds)
		}
	}
	t.Run("one forwarder's watermark alone moves nothing", func(t *testing.T) {
		if ds, _, _ := outputs(t, step(t, task, mark(t, 1000+min15, schemas.MarkOutcomes))); len(ds) != 0 || task.Clock() != 0 {
			t.Fatalf("decisions %+v, clock %d; want none, 0", ds, task.Clock())
		}
	})
	t.Run("a receipt recorded before the step's time, read before the watermark passes it, cancels it", func(t *testing.T) {
		rc := encoded(t, taskTopics.Fallback, "n1", &schemas.Receipt{ReceiptID: "r", Kind: schemas.ReceiptDisplayed, DeliveryID: "p1",
			NotificationID: "n1", Tenant: "acme", Type: "invoice.paid", At: 1000 + min15 - 1})
		rc.Timestamp, rc.Partition = time.UnixMilli(1000+min15-1), 2
		ds, cmds, _ := outputs(t, step(t, task, rc))
		if more, _, _ := outputs(t, step(t, task, mark(t, 1000+min15, schemas.MarkReceipts))); len(more) != 0 || task.Clock() != 1000+min15 {
			t.Fatalf("after the watermark: decisions %+v, clock %d; want none, the step's time", more, task.Clock())
		}
		if len(ds) != 1 || ds[0].Outcome != schemas.DecisionFallbackCancelled || cmds != 0 {
			t.Fatalf("decisions %+v, %d commands; want the step cancelled by the receipt", ds, cmds)
		}
	})
}

func TestARecordUnderAnotherNotificationsKeyIsSkipped(t *testing.T) {
	p := plan(nil, schemas.FallbackStep{IfFailed: true}, false)
	rec := encoded(t, taskTopics.Fallback, "someone-else", &p)
	rec.Timestamp, rec.Partition = time.UnixMilli(1000), 2
	task := fallback.NewTask(taskTopics, 2, 0, nil)
	var out stage.Out
	if err := task.Process(rec, &out); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatalf("emitted %d records for a plan under another key", out.Len())
	}
}
