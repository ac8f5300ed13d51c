package route

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
	t.Run("timers order by due time, then by key, and none precedes itself", func(t *testing.T) {
		q := timerQueue{{key: "b", at: 1}, {key: "a", at: 1}, {key: "a", at: 2}, {key: "b", at: 1}}
		tests := []struct {
			name string
			i, j int
			want bool
		}{
			{"an earlier due time comes first whatever the key", 0, 2, true},
			{"a later due time comes after whatever the key", 2, 0, false},
			{"at one due time the smaller key comes first", 1, 0, true},
			{"at one due time the larger key comes after", 0, 1, false},
			{"a timer does not come before an equal one", 0, 3, false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := q.Less(tt.i, tt.j); got != tt.want {
					t.Fatalf("Less(%+v, %+v) = %v, want %v", q[tt.i], q[tt.j], got, tt.want)
				}
			})
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
