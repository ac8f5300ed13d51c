package fallback_test

import (
	"testing"

	"github.com/heraldhq/herald/processors/fallback"
	"github.com/heraldhq/herald/schemas"
)

func TestWatermarksClock(t *testing.T) {
	m := func(kind string, p, n int32, at int64) schemas.FallbackMark {
		return schemas.FallbackMark{Kind: kind, Partition: p, Partitions: n, At: at}
	}
	out, rec := schemas.MarkOutcomes, schemas.MarkReceipts
	cases := []struct {
		name  string
		marks []schemas.FallbackMark
		clock int64
	}{
		{"no mark holds the clock at zero", nil, 0},
		{"one forwarder's marks alone hold it at zero", []schemas.FallbackMark{m(out, 0, 1, 50)}, 0},
		{"a partition never heard of holds it at zero", []schemas.FallbackMark{m(out, 0, 2, 50), m(rec, 0, 1, 60)}, 0},
		{"it is the earliest mark over both topics' partitions",
			[]schemas.FallbackMark{m(out, 0, 2, 50), m(out, 1, 2, 40), m(rec, 0, 1, 60)}, 40},
		{"an older mark of a source, read later, does not move it back",
			[]schemas.FallbackMark{m(out, 0, 1, 50), m(rec, 0, 1, 60), m(out, 0, 1, 10)}, 50},
		{"a topic grown to more partitions holds it until the new ones are heard of",
			[]schemas.FallbackMark{m(out, 0, 1, 50), m(rec, 0, 1, 60), m(out, 0, 2, 70)}, 0},
		{"a mark of an unknown kind or a partition outside its count is ignored",
			[]schemas.FallbackMark{m(out, 0, 1, 50), m(rec, 0, 1, 60), m("other", 0, 1, 1), m(rec, 1, 1, 1), m(rec, -1, 1, 1)}, 50},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var w fallback.Watermarks
			for _, x := range c.marks {
				w.Apply(x)
			}
			if got := w.Clock(); got != c.clock {
				t.Fatalf("clock %d, want %d", got, c.clock)
			}
			var again fallback.Watermarks
			for _, x := range w.Marks() {
				again.Apply(x)
			}
			if again.Clock() != c.clock {
				t.Fatalf("rebuilt from its marks (the changelog record), the clock is %d, want %d", again.Clock(), c.clock)
			}
		})
	}
}

func TestAForwarderMarksOnlyWhatItHasForwarded(t *testing.T) {
	cases := []struct {
		name string
		p    fallback.Probe
		pos  int64
		want bool
	}{
		{"a partition never written is read to its end", fallback.Probe{End: 0, Committed: -1}, -1, true},
		{"a task that has read to the last stable offset may mark", fallback.Probe{End: 10, Committed: 3}, 10, true},
		{"a task behind the last stable offset may not", fallback.Probe{End: 10, Committed: 3}, 9, false},
		{"the group's committed offset at the end is enough (an idle partition since assignment)", fallback.Probe{End: 10, Committed: 10}, -1, true},
		{"nothing read and nothing committed is not", fallback.Probe{End: 10, Committed: -1}, -1, false},
		{"records the retention deleted need no forwarding", fallback.Probe{Start: 10, End: 10, Committed: -1}, -1, true},
		{"records after the log start do", fallback.Probe{Start: 8, End: 10, Committed: 5}, -1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := fallback.Markable(c.p, c.pos); got != c.want {
				t.Fatalf("Markable(%+v, %d) = %v, want %v", c.p, c.pos, got, c.want)
			}
		})
	}
}
