package replay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/analytics/internal/fixture"
	"github.com/heraldhq/herald/analytics/replay"
	"github.com/heraldhq/herald/schemas"
)

func TestParseFrom(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name, in string
		want     string // From.String(), or "error"
	}{
		{"start means the log start", "start", "the log start"},
		{"an empty value means the log start", "", "the log start"},
		{"an RFC 3339 time is a time", "2026-11-29T08:00:00Z", "2026-11-29T08:00:00Z"},
		{"a date is midnight UTC", "2026-11-29", "2026-11-29T00:00:00Z"},
		{"a duration is that long ago", "24h", "2026-11-29T12:00:00Z"},
		{"a negative duration is that long ago too", "-90m", "2026-11-30T10:30:00Z"},
		{"offset:N applies to every partition", "offset:1500", "offset 1500 of every partition"},
		{"offset:P=N lists partitions", "offset:0=10,2=7", "offsets 0=10,2=7"},
		{"a negative offset is refused", "offset:-1", "error"},
		{"a malformed partition list is refused", "offset:0=1,x", "error"},
		{"words are refused", "yesterday", "error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := replay.ParseFrom(c.in, now)
			got := "error"
			if err == nil {
				got = f.String()
			}
			if got != c.want {
				t.Fatalf("ParseFrom(%q) = %q (%v), want %q", c.in, got, err, c.want)
			}
		})
	}
}

func TestReplayOnAPipelineRun(t *testing.T) {
	f := fixture.Run(t)
	ctx := context.Background()
	opts := func(from replay.From) replay.Options {
		return replay.Options{Brokers: f.Brokers, Catalog: f.Catalog, ClickHouse: f.Conn, Database: f.DB, Policy: fixture.Policy, From: from}
	}
	// Progress counts the topic's offsets, explains included.
	requests := int64(len(f.Requests) + f.Undecodable + f.Explains)
	var dup, other schemas.Decision
	for _, d := range f.Decisions {
		switch {
		case dup.DecisionID == "" && d.Outcome == schemas.DecisionDuplicate:
			dup = d
		case other.DecisionID == "" && d.Outcome == schemas.DecisionAccepted:
			other = d
		}
	}

	t.Run("replaying the whole log reports no difference", func(t *testing.T) {
		var calls int
		o := opts(replay.From{Start: true})
		o.Progress = func(done, total int64) {
			calls++
			if done > total || total != requests {
				t.Errorf("progress %d/%d, want at most %d/%d", done, total, requests, requests)
			}
		}
		rep, err := replay.Run(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Differences) != 0 || rep.Compared != requests || rep.Read != requests {
			t.Fatalf("read %d, compared %d, differences %v; want %d, %d, none", rep.Read, rep.Compared, rep.Differences, requests, requests)
		}
		if calls == 0 {
			t.Error("no progress was reported")
		}
	})

	t.Run("replaying from a time warms up first and reports no difference", func(t *testing.T) {
		rep, err := replay.Run(ctx, opts(replay.From{Time: f.Until.Add(-11 * time.Hour)}))
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Differences) != 0 || rep.Compared == 0 || rep.Compared >= rep.Read {
			t.Fatalf("read %d, compared %d, differences %v; want a warm-up and no difference", rep.Read, rep.Compared, rep.Differences)
		}
	})

	t.Run("without a warm-up a repeat of an earlier request is reported", func(t *testing.T) {
		o := opts(replay.From{Time: time.UnixMilli(dup.At)})
		o.Warmup = time.Millisecond
		rep, err := replay.Run(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range rep.Differences {
			if d.DecisionID == dup.DecisionID && d.Kind == "changed" && d.Fields[0].Field == "outcome" {
				return
			}
		}
		t.Fatalf("differences %v lack the duplicate %s seen without its original", rep.Differences, dup.DecisionID)
	})

	// Deliberate changes to the audit, one after the other.
	mutate := func(t *testing.T, stmt string, args ...any) {
		t.Helper()
		if err := f.Conn.Exec(ctx, stmt+" SETTINGS mutations_sync = 2", args...); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a changed audit row is reported, and only it", func(t *testing.T) {
		mutate(t, "ALTER TABLE decisions UPDATE outcome = 'accepted', original_request_id = '' WHERE decision_id = ?", dup.DecisionID)
		rep, err := replay.Run(ctx, opts(replay.From{Start: true}))
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Differences) != 1 {
			t.Fatalf("%d differences, want exactly 1: %v", len(rep.Differences), rep.Differences)
		}
		d := rep.Differences[0]
		want := fmt.Sprintf("[{outcome accepted duplicate} {original_request_id  %s}]", dup.OriginalRequestID)
		if d.DecisionID != dup.DecisionID || d.Kind != "changed" || fmt.Sprint(d.Fields) != want || d.Offset != dup.SourceOffset {
			t.Fatalf("difference %s, want decision %s with fields %s", d, dup.DecisionID, want)
		}
	})

	t.Run("a deleted audit row is reported as missing from the audit", func(t *testing.T) {
		mutate(t, "ALTER TABLE decisions DELETE WHERE decision_id = ?", other.DecisionID)
		rep, err := replay.Run(ctx, opts(replay.From{Start: true}))
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]string{}
		for _, d := range rep.Differences {
			kinds[d.DecisionID] = d.Kind
		}
		if len(rep.Differences) != 2 || kinds[dup.DecisionID] != "changed" || kinds[other.DecisionID] != "missing from the audit" {
			t.Fatalf("differences %v, want the changed row and the deleted one", rep.Differences)
		}
	})
}
