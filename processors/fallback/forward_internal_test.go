package fallback

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

// TestAForwarderWritesItsMarkToEveryPartitionOnceItHasForwardedThatFar
// drives one forwarder task with probes set by hand.
func TestAForwarderWritesItsMarkToEveryPartitionOnceItHasForwardedThatFar(t *testing.T) {
	ps := &probes{byPart: map[int32]Probe{}, fallback: 3}
	f := &forwardTask{topic: "fb", kind: schemas.MarkReceipts, partition: 1, probes: ps, log: nil, pos: -1, pendingPos: -1}
	marks := func(out *stage.Out) (at []int64, parts []int32) {
		for _, r := range out.Records() {
			if header(r) != schemas.FallbackWatermarkV1 {
				continue
			}
			var w schemas.FallbackWatermark
			if err := schemas.Decode(r.Value, &w); err != nil || len(w.Marks) != 1 {
				t.Fatalf("mark %s: %v", r.Value, err)
			}
			m := w.Marks[0]
			if m.Kind != schemas.MarkReceipts || m.Partition != 1 || m.Partitions != 2 || string(r.Key) != "watermark/receipts/1" {
				t.Fatalf("mark %+v under key %s", m, r.Key)
			}
			at, parts = append(at, m.At), append(parts, r.Partition)
		}
		return at, parts
	}
	tx := func(offsets ...int64) *stage.Out {
		var out stage.Out
		for _, o := range offsets {
			// A control record (a commit marker): no header, forwarded never.
			if err := f.Process(&kgo.Record{Partition: 1, Offset: o}, &out); err != nil {
				t.Fatal(err)
			}
		}
		f.Tick(&out)
		return &out
	}

	ps.byPart[1] = Probe{At: 100, End: 5, Committed: 2, Partitions: 2}
	if at, _ := marks(tx()); len(at) != 0 {
		t.Fatalf("marked %v before reading to the probe's end", at)
	}
	f.Commit()
	out := tx(2, 3, 4)
	if at, parts := marks(out); len(at) != 3 || at[0] != 100 || parts[0] != 0 || parts[1] != 1 || parts[2] != 2 {
		t.Fatalf("marks %v on partitions %v, want 100 on 0, 1 and 2", at, parts)
	}
	t.Run("an aborted transaction's mark is written again by the retry", func(t *testing.T) {
		f.Abort()
		if at, _ := marks(tx(2, 3, 4)); len(at) != 3 {
			t.Fatalf("marks %v after the abort, want the mark again", at)
		}
		f.Commit()
	})
	t.Run("a mark is written once per probe", func(t *testing.T) {
		if at, _ := marks(tx()); len(at) != 0 {
			t.Fatalf("marked %v again", at)
		}
		f.Commit()
	})
	t.Run("an idle partition is marked on the group's committed offset", func(t *testing.T) {
		g := &forwardTask{topic: "fb", kind: schemas.MarkReceipts, partition: 1, probes: ps, pos: -1, pendingPos: -1}
		ps.byPart[1] = Probe{At: 200, End: 5, Committed: 5, Partitions: 2}
		var out stage.Out
		g.Tick(&out)
		if at, _ := marks(&out); len(at) != 3 || at[0] != 200 {
			t.Fatalf("marks %v, want 200 on every partition", at)
		}
	})
}
