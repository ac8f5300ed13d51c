package route

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/reply"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

func acceptedRecord(t *testing.T, n schemas.Accepted, off int64, at time.Duration) *kgo.Record {
	t.Helper()
	b, err := schemas.Encode(&n)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: "accepted", Partition: harnessPartition, Value: b, Offset: off, Timestamp: base.Add(at)}
}

func count(out *stage.Out, topic string) int {
	n := 0
	for _, r := range out.Records() {
		if r.Topic == topic {
			n++
		}
	}
	return n
}

func TestAbortDropsPendingState(t *testing.T) {
	quiet := Recipient{Devices: fourDevices[:1], Prefs: &schemas.Preferences{QuietHours: &schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "UTC"}}}
	limit := Policy{Rates: map[string]RateLimit{"x": {Max: 1, WindowMs: 3600_000}}}
	t.Run("a notification processed again after an abort is counted once", func(t *testing.T) {
		h := newHarness(t, limit, quiet)
		rec := acceptedRecord(t, note("x", "1"), 0, 0)
		var out stage.Out
		if err := h.task.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
		h.task.Abort()
		out = stage.Out{}
		if err := h.task.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
		h.task.Commit()
		h.collect(&out)
		if got := h.outcomes(); got != "routed" {
			t.Fatalf("decisions %q after an abort and a retry, want routed", got)
		}
	})
	t.Run("a timer fired in an aborted transaction fires again", func(t *testing.T) {
		h := newHarness(t, limit, quiet)
		h.send(note("x", "1"), 11*time.Hour) // 23:00 UTC: deferred
		h.clock = base.Add(19 * time.Hour).UnixMilli()
		var out stage.Out
		h.task.Tick(&out)
		if count(&out, "d.apns") != 1 {
			t.Fatalf("the release emitted %d apns commands, want 1", count(&out, "d.apns"))
		}
		h.task.Abort()
		h.tick(19 * time.Hour)
		h.tick(20 * time.Hour)
		if got := h.outcomes(); got != "deferred routed" || h.deliveries() != "apns/ios-a feed/feed" {
			t.Fatalf("decisions %q, deliveries %q; want the release once after the abort", got, h.deliveries())
		}
	})
}

func TestRestoredStateContinuesCountsAndTimersExactly(t *testing.T) {
	p := Policy{Rates: map[string]RateLimit{"x": {Max: 2, WindowMs: 3600_000}}, Digests: map[string]Digest{"c": {WindowMs: 600_000}}}
	who := Recipient{Devices: fourDevices[:1], Prefs: &schemas.Preferences{QuietHours: &schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "UTC"}}}
	run := func(t *testing.T, restartAfter int) string {
		h := newHarness(t, p, who)
		sends := []send{{note("x", "1"), 11 * time.Hour}, {note("c", "1"), 11 * time.Hour}, {note("x", "2"), 11*time.Hour + time.Minute},
			{note("c", "2"), 11*time.Hour + time.Minute}, {note("x", "3"), 11*time.Hour + 2*time.Minute}}
		for i, s := range sends {
			if i == restartAfter {
				// A new task restored from the compacted changelog alone.
				fresh := NewTask(p, testTopics, harnessPartition, h.task.dir, h.task.now)
				keys := make([]string, 0, len(h.state))
				for k := range h.state {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					if err := fresh.Restore(&kgo.Record{Topic: "route", Partition: harnessPartition, Key: []byte(k), Value: h.state[k]}); err != nil {
						t.Fatal(err)
					}
				}
				h.task = fresh
			}
			h.send(s.n, s.at)
		}
		h.tick(20 * time.Hour)
		return h.outcomes() + " | " + h.deliveries()
	}
	want := run(t, -1)
	if want != "deferred digested deferred digested rate_limited deferred routed routed routed | apns/ios-a apns/ios-a apns/ios-a feed/feed feed/feed feed/feed" {
		t.Fatalf("without a restart: %s", want)
	}
	for i := 1; i < 5; i++ {
		t.Run("a restart after "+string(rune('0'+i))+" notifications changes nothing", func(t *testing.T) {
			if got := run(t, i); got != want {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// unreachable is a Directory whose Sync fails while the broker is down.
type unreachable struct {
	StaticDirectory
	down bool
}

func (u *unreachable) Sync(context.Context, int32) error {
	if u.down {
		return errors.New("list end offsets: connection refused")
	}
	return nil
}

func TestADirectoryOutOfReachIsATransientError(t *testing.T) {
	dir := &unreachable{StaticDirectory: StaticDirectory{schemas.RecipientKey("acme", "u1"): {Devices: fourDevices[:1]}}, down: true}
	task := NewTask(Policy{}, testTopics, harnessPartition, dir, func() int64 { return 0 })
	rec := acceptedRecord(t, note("x", "1"), 0, 0)
	t.Run("while the broker is down Process fails with an error that restarts the session, not one that stops the stage", func(t *testing.T) {
		var out stage.Out
		err := task.Process(rec, &out)
		if err == nil || !stage.IsTransient(err) {
			t.Fatalf("Process = %v, want a stage.Transient error", err)
		}
		if out.Len() != 0 {
			t.Fatalf("%d records emitted before the directory synced, want none", out.Len())
		}
	})
	t.Run("once it is back the same record is routed", func(t *testing.T) {
		dir.down = false
		var out stage.Out
		if err := task.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
		if count(&out, "d.apns") != 1 {
			t.Fatalf("%d apns commands, want 1", count(&out, "d.apns"))
		}
	})
}

func TestTimersAreQueuedOncePerDueTimeAndFireInOrder(t *testing.T) {
	t.Run("a digest's later notifications do not queue its timer again", func(t *testing.T) {
		h := newHarness(t, Policy{Digests: map[string]Digest{"c": {WindowMs: 600_000}}}, Recipient{Devices: fourDevices[:1]})
		h.send(note("c", "1"), time.Hour)
		h.send(note("c", "2"), time.Hour+time.Minute)
		h.send(note("c", "3"), time.Hour+2*time.Minute)
		if n := h.task.timers.Len(); n != 1 {
			t.Fatalf("%d timers queued for one digest window, want 1", n)
		}
		h.tick(time.Hour + 11*time.Minute)
		if got := h.outcomes(); got != "digested digested digested routed" {
			t.Fatalf("decisions %q, want three digested and the digest routed once", got)
		}
	})
}

func TestDecisionsAreWrittenInTheTasksRecordFormat(t *testing.T) {
	who := Recipient{Devices: fourDevices[:1]}
	for _, c := range []struct {
		name   string
		format schemas.Format
		schema string
	}{{"format v2", schemas.FormatBinary, schemas.DecisionV2}, {"the zero format", "", schemas.DecisionV2}, {"format v1", schemas.FormatJSON, schemas.DecisionV1}} {
		t.Run(c.name+" writes "+c.schema+", named in the header, from an accepted notification of either version", func(t *testing.T) {
			for i, accepted := range []string{schemas.AcceptedV2, schemas.AcceptedV1} {
				h := newHarness(t, Policy{}, who)
				h.task.RecordFormat = c.format
				n := note("x", "1")
				n.Schema = accepted
				var out stage.Out
				if err := h.task.Process(acceptedRecord(t, n, int64(i), 0), &out); err != nil {
					t.Fatal(err)
				}
				decisions := 0
				for _, r := range out.Records() {
					if r.Topic != testTopics.Decisions {
						continue
					}
					decisions++
					var d schemas.Decision
					if err := schemas.Decode(r.Value, &d); err != nil {
						t.Fatal(err)
					}
					var header string
					for _, hd := range r.Headers {
						if hd.Key == schemas.HeaderSchema {
							header = string(hd.Value)
						}
					}
					if d.Schema != c.schema || header != c.schema || schemas.IsJSON(r.Value) != (c.schema == schemas.DecisionV1) {
						t.Fatalf("a decision read as %s, header %q, want %s", d.Schema, header, c.schema)
					}
					if d.Outcome != schemas.DecisionRouted || d.NotificationID != n.NotificationID {
						t.Fatalf("decision %+v", d)
					}
				}
				if decisions != 1 {
					t.Fatalf("%d decisions, want 1", decisions)
				}
			}
		})
	}
}

func TestTheNotificationsDecisionIsAnsweredOnTheReplyPartitionItNamed(t *testing.T) {
	tp := testTopics
	tp.Replies, tp.ReplyPartitions = "replies", 4
	quiet := Recipient{Devices: fourDevices[:1], Prefs: &schemas.Preferences{QuietHours: &schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "UTC"}}}
	process := func(t *testing.T, task *Task, n schemas.Accepted, at time.Duration, hs []kgo.RecordHeader) *stage.Out {
		t.Helper()
		rec := acceptedRecord(t, n, 0, at)
		rec.Headers = hs
		var out stage.Out
		if err := task.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
		task.Commit()
		return &out
	}
	replies := func(out *stage.Out) []schemas.Decision {
		var ds []schemas.Decision
		for _, r := range out.Records() {
			if r.Topic == "replies" {
				var d schemas.Decision
				if err := schemas.Decode(r.Value, &d); err != nil {
					t.Fatal(err)
				}
				if r.Partition != 2 {
					t.Fatalf("a reply on partition %d, want 2", r.Partition)
				}
				ds = append(ds, d)
			}
		}
		return ds
	}
	t.Run("a routed notification's decision, and none of its channels', is answered", func(t *testing.T) {
		task := NewTask(Policy{}, tp, 0, StaticDirectory{schemas.RecipientKey("acme", "u1"): Recipient{Devices: fourDevices}}, nil)
		out := process(t, task, note("x", "1"), 0, reply.AppendHeader(nil, 2))
		ds := replies(out)
		if len(ds) != 1 || ds[0].Channel != "" || ds[0].Outcome != schemas.DecisionRouted || len(ds[0].Deliveries) == 0 {
			t.Fatalf("replies %+v; want the one routed decision with its deliveries", ds)
		}
	})
	t.Run("a deferral is answered when decided, and its release later is not", func(t *testing.T) {
		clock := int64(0)
		task := NewTask(Policy{}, tp, 0, StaticDirectory{schemas.RecipientKey("acme", "u1"): quiet}, func() int64 { return clock })
		out := process(t, task, note("x", "1"), 11*time.Hour, reply.AppendHeader(nil, 2)) // 23:00 UTC
		if ds := replies(out); len(ds) != 1 || ds[0].Outcome != schemas.DecisionDeferred {
			t.Fatalf("replies %+v; want the deferral", ds)
		}
		clock = base.Add(20 * time.Hour).UnixMilli()
		var tick stage.Out
		task.Tick(&tick)
		if count(&tick, "d.apns") != 1 || len(replies(&tick)) != 0 {
			t.Fatalf("the release emitted %d apns commands and %d replies; want 1 and none", count(&tick, "d.apns"), len(replies(&tick)))
		}
	})
	t.Run("a notification that names no partition, or a partition the topic does not have, is not answered", func(t *testing.T) {
		task := NewTask(Policy{}, tp, 0, StaticDirectory{schemas.RecipientKey("acme", "u1"): Recipient{Devices: fourDevices}}, nil)
		for i, hs := range [][]kgo.RecordHeader{nil, reply.AppendHeader(nil, 4)} {
			if out := process(t, task, note("x", fmt.Sprint(i)), 0, hs); count(out, "replies") != 0 || count(out, "decisions") == 0 {
				t.Fatalf("notification %d: %d replies, want none", i, count(out, "replies"))
			}
		}
	})
}

func TestAnExplainIsAnsweredAsTheNotificationWouldBeAndChangesNothing(t *testing.T) {
	tp := testTopics
	tp.Replies, tp.ReplyPartitions = "replies", 4
	limit := Policy{Rates: map[string]RateLimit{"x": {Max: 2, WindowMs: 3600_000}}}
	explainHeaders := append(reply.AppendHeader(nil, 3), reply.ExplainRouteHeader())
	h := newHarness(t, limit, Recipient{Devices: fourDevices[:1]})
	h.task.topics = tp
	explain := func(key string) schemas.Decision {
		t.Helper()
		rec := acceptedRecord(t, note("x", key), 100+h.off, time.Minute)
		rec.Headers = explainHeaders
		var out stage.Out
		if err := h.task.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
		h.task.Commit()
		recs := out.Records()
		if len(recs) != 1 || recs[0].Topic != "replies" || recs[0].Partition != 3 {
			t.Fatalf("the explain emitted %d records, want its one reply on partition 3", len(recs))
		}
		var d schemas.Decision
		if err := schemas.Decode(recs[0].Value, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	t.Run("explains count against no limit and leave no state", func(t *testing.T) {
		for i := range 3 {
			if d := explain(fmt.Sprint("e", i)); d.Outcome != schemas.DecisionRouted || len(d.Deliveries) != 2 {
				t.Fatalf("explain %d: %s with %d deliveries, want routed to the phone and the feed", i, d.Outcome, len(d.Deliveries))
			}
		}
		if h.task.Len() != 0 {
			t.Fatalf("the task holds %d state entries after explains, want none", h.task.Len())
		}
	})
	t.Run("an explain after the limit is reached says rate limited", func(t *testing.T) {
		h.send(note("x", "1"), time.Minute)
		h.send(note("x", "2"), time.Minute)
		if d := explain("3"); d.Outcome != schemas.DecisionRateLimited {
			t.Fatalf("explain says %s, want rate_limited", d.Outcome)
		}
		if got := h.outcomes(); got != "routed routed" {
			t.Fatalf("decisions %q: the explains made decisions of their own", got)
		}
	})
}
