package fallback

import (
	"maps"
	"slices"
	"strconv"

	"github.com/heraldhq/herald/schemas"
)

// Kinds are the forwarders whose marks make the stage's clock, by the
// topic each reads.
var Kinds = []string{schemas.MarkOutcomes, schemas.MarkReceipts}

// Watermarks are the marks one partition of the fallback stage has read:
// per forwarder kind and source partition the latest time, and per kind
// the largest partition count a mark named. The zero value holds none.
type Watermarks struct {
	at    map[markKey]int64
	parts map[string]int32
}

type markKey struct {
	kind      string
	partition int32
}

// Apply adds a mark, reporting whether it moved anything: a mark no later
// than the one kept for its source (a forwarder's older mark, read after a
// newer one) changes nothing, nor does a mark of an unknown kind or of a
// partition outside its count.
func (w *Watermarks) Apply(m schemas.FallbackMark) bool {
	if !slices.Contains(Kinds, m.Kind) || m.Partition < 0 || m.Partitions <= m.Partition {
		return false
	}
	changed := false
	if m.Partitions > w.parts[m.Kind] {
		if w.parts == nil {
			w.parts = map[string]int32{}
		}
		w.parts[m.Kind], changed = m.Partitions, true
	}
	k := markKey{m.Kind, m.Partition}
	if old, ok := w.at[k]; !ok || m.At > old {
		if w.at == nil {
			w.at = map[markKey]int64{}
		}
		w.at[k], changed = m.At, true
	}
	return changed
}

// Clock is the stage's clock on this partition: the earliest mark over
// every partition of both forwarders' topics. A partition never heard of
// (or a kind) holds it at 0: a step fires only once every record
// committed to herald.outcomes and herald.receipts before its time has
// been read.
func (w *Watermarks) Clock() int64 {
	clock := int64(-1)
	for _, kind := range Kinds {
		n := w.parts[kind]
		if n == 0 {
			return 0
		}
		for p := range n {
			at, ok := w.at[markKey{kind, p}]
			if !ok {
				return 0
			}
			if clock < 0 || at < clock {
				clock = at
			}
		}
	}
	return max(clock, 0)
}

// Marks are every mark held, in kind and partition order (the changelog
// record).
func (w *Watermarks) Marks() []schemas.FallbackMark {
	keys := slices.SortedFunc(maps.Keys(w.at), func(a, b markKey) int {
		if a.kind != b.kind {
			if a.kind < b.kind {
				return -1
			}
			return 1
		}
		return int(a.partition - b.partition)
	})
	out := make([]schemas.FallbackMark, 0, len(keys))
	for _, k := range keys {
		out = append(out, schemas.FallbackMark{Kind: k.kind, Partition: k.partition, Partitions: w.parts[k.kind], At: w.at[k]})
	}
	return out
}

// Clone returns a copy that shares nothing with w.
func (w *Watermarks) Clone() *Watermarks {
	return &Watermarks{at: maps.Clone(w.at), parts: maps.Clone(w.parts)}
}

// Probe is one reading a forwarder made of one partition of the topic it
// forwards: At, its clock (ms) just before it asked the partition's
// leader for the last stable offset End (read_committed: every record
// committed before At lies below End); Start, the partition's log start
// offset, and Committed, the forwarder group's committed offset (-1:
// none), both asked for after End; Partitions, the topic's partition
// count.
type Probe struct {
	At                    int64
	Start, End, Committed int64
	Partitions            int32
}

// Markable reports whether a forwarder task of the probed partition may
// write the mark At of probe p, its position being pos (the offset after
// the last record it read, control records included, counting the records
// forwarded in the open transaction; -1: none read): whether every record
// below End is forwarded, in the open transaction or a committed one. The
// group's committed offset counts the committed transactions of every
// instance, the task's position those of its own session; records below
// Start were deleted by the topic's retention and can no longer be.
func Markable(p Probe, pos int64) bool {
	return max(pos, p.Committed, p.Start) >= p.End
}

// markKeyOf is the key of a forwarder's mark on herald.fallback.
func markKeyOf(kind string, partition int32) string {
	return "watermark/" + kind + "/" + strconv.Itoa(int(partition))
}

// watermarksKey is the key of the stage's marks on herald.fallbackstate
// (a notification id is 32 hex characters: never this).
const watermarksKey = "watermarks"
