package dedupe

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
)

func TestASeenSetDecidesAsThePolicyOverTheSameEntries(t *testing.T) {
	p := Policy{DefaultWindowMs: 1000, IdempotencyTTLMs: 3000}
	history := []sent{
		{req("a", "k1", "i1"), 0},
		{req("b", "k2", ""), 200 * time.Millisecond},
		{req("c", "k3", "i3"), 1500 * time.Millisecond}, // expires k1: a tombstone
		{req("d", "", "i4"), 1600 * time.Millisecond},
	}
	for _, format := range []string{"v2", "v1", "v3"} {
		t.Run("from herald.seen/"+format, func(t *testing.T) {
			live := NewTask(p, testTopics, 0)
			live.SeenJSON, live.SeenPerKey = format == "v1", format != "v3"
			// ref writes the per-key layout beside a batched live task: the
			// reference map is made of its records.
			ref := NewTask(p, testTopics, 0)
			ref.SeenPerKey = true
			set := NewSeenSet()
			entries := map[string]schemas.SeenEntry{} // the reference: what the API kept before, a map of decoded entries
			for i, s := range history {
				x := feed(t, live, int64(i), []sent{s})
				live.Commit()
				for _, r := range x.seen {
					if err := set.Apply(r); err != nil {
						t.Fatal(err)
					}
				}
				if format == "v3" {
					x = feed(t, ref, int64(i), []sent{s})
					ref.Commit()
				}
				for _, r := range x.seen {
					if r.Value == nil {
						delete(entries, string(r.Key))
						continue
					}
					var e schemas.SeenEntry
					if err := schemas.Decode(r.Value, &e); err != nil {
						t.Fatal(err)
					}
					entries[string(r.Key)] = e
				}
			}
			// A batched copy deletes expired entries by the sweep time, a few
			// thousand at a time (sweepEvery): it may hold more than the map.
			if format != "v3" && set.Len() != len(entries) || live.Len() != len(entries) {
				t.Fatalf("the set holds %d entries, the map %d, the stage %d", set.Len(), len(entries), live.Len())
			}
			lookup := func(key string) (schemas.SeenEntry, bool) { e, ok := entries[key]; return e, ok }
			probes := []struct {
				r    schemas.Request
				at   time.Duration
				want string
			}{
				{req("a", "k1", "i1"), 1700 * time.Millisecond, schemas.DecisionIdempotentReplay},
				{req("other body", "k9", "i1"), 1700 * time.Millisecond, schemas.DecisionIdempotencyConflict},
				{req("c", "k3", "i3b"), 1800 * time.Millisecond, schemas.DecisionDuplicate},
				{req("b", "k2", ""), 1900 * time.Millisecond, schemas.DecisionAccepted}, // k2's window ended
				{req("new", "k7", ""), 1900 * time.Millisecond, schemas.DecisionAccepted},
				{req("d", "", "i4"), 1900 * time.Millisecond, schemas.DecisionIdempotentReplay},
			}
			src := Source{Topic: "explain", Partition: -1, Offset: -1}
			for _, pr := range probes {
				at := taskBase.Add(pr.at).UnixMilli()
				got, want := set.Decide(p, pr.r, at, src), p.Decide(pr.r, at, src, lookup)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("request %q: the set decides\n%+v\nthe policy over the entries\n%+v", pr.r.Title, got, want)
				}
				if got.Decision.Outcome != pr.want {
					t.Fatalf("request %q: %s, want %s", pr.r.Title, got.Decision.Outcome, pr.want)
				}
			}
		})
	}
}

func TestASeenSetAppliesTombstonesAndRefusesWhatIsNotAnEntry(t *testing.T) {
	live := NewTask(Policy{DefaultWindowMs: 60_000, IdempotencyTTLMs: 60_000}, testTopics, 3)
	live.SeenPerKey = true
	x := feed(t, live, 0, []sent{{req("a", "k1", "i1"), 0}})
	set := NewSeenSet()
	for _, r := range x.seen {
		if err := set.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	if set.Len() != 2 {
		t.Fatalf("%d entries, want 2 (the idempotency and the dedupe key)", set.Len())
	}
	key := x.seen[0].Key
	t.Run("a value that is not a seen entry is refused, naming its key, and changes nothing", func(t *testing.T) {
		err := set.Apply(&kgo.Record{Key: key, Value: []byte(`{"schema":"herald.request/v1"}`), Partition: 3})
		if err == nil || !strings.Contains(err.Error(), string(key)) || set.Len() != 2 {
			t.Fatalf("err %v, %d entries", err, set.Len())
		}
	})
	t.Run("a tombstone on a partition never seen is a no-op", func(t *testing.T) {
		if err := set.Apply(&kgo.Record{Key: key, Partition: 7}); err != nil || set.Len() != 2 {
			t.Fatalf("err %v, %d entries", err, set.Len())
		}
	})
	t.Run("a tombstone deletes the key on its partition", func(t *testing.T) {
		if err := set.Apply(&kgo.Record{Key: key, Partition: 3}); err != nil || set.Len() != 1 {
			t.Fatalf("err %v, %d entries, want 1", err, set.Len())
		}
	})
}

func TestASeenSetCopyOfBucketRecordsDropsTheEntriesTheStageDeleted(t *testing.T) {
	p := Policy{DefaultWindowMs: 60_000, IdempotencyTTLMs: 60_000}
	live := NewTask(p, testTopics, 0)
	set := NewSeenSet()
	const n = 10_000 // distinct keys 100 ms apart: about 600 live at a time
	for i := 0; i < n; i += 500 {
		batch := make([]sent, 500)
		for j := range batch {
			batch[j] = sent{req("t", fmt.Sprintf("k%d", i+j), ""), time.Duration(i+j) * 100 * time.Millisecond}
		}
		x := feed(t, live, int64(i), batch)
		live.Commit()
		for _, r := range x.seen {
			if err := set.Apply(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The copy sweeps a few thousand entries at a time (sweepEvery, 4,096):
	// it holds the live keys and the entries set since its last sweep.
	if set.Len() > live.Len()+4096 {
		t.Fatalf("the copy holds %d entries, the stage %d: the deleted ones were kept", set.Len(), live.Len())
	}
	// And decides as the stage: a key is a duplicate inside its last minute.
	src := Source{Topic: "explain", Partition: -1, Offset: -1}
	at := taskBase.Add(time.Duration(n) * 100 * time.Millisecond).UnixMilli()
	for i, want := range map[int]string{0: schemas.DecisionAccepted, n / 2: schemas.DecisionAccepted, n - 700: schemas.DecisionAccepted,
		n - 500: schemas.DecisionDuplicate, n - 1: schemas.DecisionDuplicate} {
		if got := set.Decide(p, req("t", fmt.Sprintf("k%d", i), ""), at, src).Decision.Outcome; got != want {
			t.Fatalf("key %d: the copy decides %s, want %s", i, got, want)
		}
	}
}
