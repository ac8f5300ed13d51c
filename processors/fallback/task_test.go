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

func TestAStepTimerIsRestoredFromTheChangelogAndFiresOnce(t *testing.T) {
	p := plan([]string{"p1"}, schemas.FallbackStep{AfterMs: min15, Unless: []string{schemas.ReceiptDisplayed}}, false)
	rec := encoded(t, taskTopics.Fallback, p.NotificationID, &p)
	rec.Timestamp, rec.Partition = time.UnixMilli(1000), 2
	var clock int64
	a := fallback.NewTask(taskTopics, 2, func() int64 { return clock }, 0, nil)
	var out stage.Out
	if err := a.Process(rec, &out); err != nil {
		t.Fatal(err)
	}
	a.Tick(&out)
	a.Commit()
	ds, cmds, state := outputs(t, &out)
	if len(ds) != 0 || cmds != 0 || state["n1"] == nil {
		t.Fatalf("before its time: %d decisions, %d commands, state %v", len(ds), cmds, state)
	}

	// A new instance restores the entry and fires the step when its clock
	// reaches the step's time, once.
	b := fallback.NewTask(taskTopics, 2, func() int64 { return clock }, 0, nil)
	if err := b.Restore(state["n1"]); err != nil {
		t.Fatal(err)
	}
	clock = 1000 + min15 - 1
	out.Reset()
	b.Tick(&out)
	if ds, _, _ := outputs(t, &out); len(ds) != 0 {
		t.Fatalf("fired before its time: %+v", ds)
	}
	clock = 1000 + min15
	out.Reset()
	b.Tick(&out)
	ds, cmds, state = outputs(t, &out)
	if len(ds) != 1 || ds[0].Outcome != schemas.DecisionFallback || cmds != 1 || ds[0].At != 1000+min15 {
		t.Fatalf("at its time: decisions %+v, %d commands", ds, cmds)
	}

	// Aborted, the same transaction fires it again; committed, never.
	b.Abort()
	out.Reset()
	b.Tick(&out)
	if again, cmds, _ := outputs(t, &out); len(again) != 1 || cmds != 1 || again[0].DecisionID != ds[0].DecisionID {
		t.Fatalf("after an abort: decisions %+v, %d commands; want the same step fired again", again, cmds)
	}
	b.Commit()
	clock += 60_000
	out.Reset()
	b.Tick(&out)
	if again, cmds, _ := outputs(t, &out); len(again) != 0 || cmds != 0 {
		t.Fatalf("after the commit: decisions %+v, %d commands; want none", again, cmds)
	}

	// A third instance restored from the committed entry fires nothing.
	var e schemas.Fallback
	if err := schemas.Decode(state["n1"].Value, &e); err != nil || e.Steps[1].State != schemas.FallbackFired || !e.Done {
		t.Fatalf("the committed entry %+v (%v): want the step fired, done", e, err)
	}
	c := fallback.NewTask(taskTopics, 2, func() int64 { return clock }, 0, nil)
	if err := c.Restore(state["n1"]); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	c.Tick(&out)
	if again, cmds, _ := outputs(t, &out); len(again) != 0 || cmds != 0 {
		t.Fatalf("restored after the fire: decisions %+v, %d commands", again, cmds)
	}
}

func TestARecordUnderAnotherNotificationsKeyIsSkipped(t *testing.T) {
	p := plan(nil, schemas.FallbackStep{IfFailed: true}, false)
	rec := encoded(t, taskTopics.Fallback, "someone-else", &p)
	rec.Timestamp, rec.Partition = time.UnixMilli(1000), 2
	task := fallback.NewTask(taskTopics, 2, nil, 0, nil)
	var out stage.Out
	if err := task.Process(rec, &out); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatalf("emitted %d records for a plan under another key", out.Len())
	}
}
