package dedupe

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/heraldhq/herald/schemas/seenpb"
)

// Tests of the batched layout of herald.seen (batch.go).

// setEntry is one entry of a seen-set, for comparing two.
type setEntry struct {
	v seenVal
	s seenStrings
}

// liveSet is the task's committed seen-set less the entries the sweep
// time has passed (due: the task deletes them at its next request, before
// deciding it).
func liveSet(task *Task, sweptTo int64) map[seenKey]setEntry {
	task.settle()
	m := map[seenKey]setEntry{}
	for i, tb := range task.seen {
		for pos := range tb.used {
			id, ok := tb.keyAt(pos)
			if !ok {
				continue
			}
			v, s := tb.entry(pos)
			if v.expiresAt <= sweptTo {
				continue
			}
			m[seenKey{id: id, kind: seenKind(i + 1)}] = setEntry{v, s}
		}
	}
	return m
}

// sameSet fails the test unless two tasks hold the same live seen-set,
// stream time and sweep time.
func sameSet(t *testing.T, what string, got, want *Task) {
	t.Helper()
	if got.sweptTo != want.sweptTo {
		t.Fatalf("%s: sweep time %d, want %d", what, got.sweptTo, want.sweptTo)
	}
	sameEntries(t, what, got, want)
	if n := len(liveSet(got, got.sweptTo)); got.Len() != n {
		t.Fatalf("%s: %d entries, %d of them before the sweep time: a restored task holds none past it", what, got.Len(), got.Len()-n)
	}
}

// sameEntries is sameSet but for the sweep time, which a per-key log does
// not record: the live entries are those past want's.
func sameEntries(t *testing.T, what string, got, want *Task) {
	t.Helper()
	g, w := liveSet(got, want.sweptTo), liveSet(want, want.sweptTo)
	if got.streamTime != want.streamTime {
		t.Fatalf("%s: stream time %d, sweep time %d; want %d, %d", what, got.streamTime, got.sweptTo, want.streamTime, want.sweptTo)
	}
	if len(g) != len(w) {
		t.Fatalf("%s: %d live entries, want %d", what, len(g), len(w))
	}
	for k, e := range w {
		if ge, ok := g[k]; !ok || ge != e {
			t.Fatalf("%s: key %x (kind %d) holds %+v (found %v), want %+v", what, k.id, k.kind, ge, ok, e)
		}
	}
}

// compacted is log as a compacted topic keeps it: the last record of each
// key, in their order; without tombstones too once they are removed
// (delete.retention.ms).
func compacted(log []*kgo.Record, keepTombstones bool) []*kgo.Record {
	last := map[string]int{}
	for i, r := range log {
		last[string(r.Key)] = i
	}
	var out []*kgo.Record
	for i, r := range log {
		if last[string(r.Key)] == i && (r.Value != nil || keepTombstones) {
			out = append(out, r)
		}
	}
	return out
}

// expiringSends is a workload whose keys expire and come again: the
// crash workload's requests 100 ms apart, windows of 60 s (dedupe) and
// 120 s (idempotency), so keys expire, buckets end and keys are set again
// after their window.
func expiringSends(n int) (Policy, []sent) {
	p := Policy{DefaultWindowMs: 60_000, IdempotencyTTLMs: 120_000, SkewAllowanceMs: 5_000}
	reqs, _ := crashWorkload(rand.New(rand.NewPCG(7, 8)))
	sends := make([]sent, n)
	for i := range sends {
		sends[i] = sent{reqs[i], time.Duration(i) * 100 * time.Millisecond}
	}
	return p, sends
}

func TestARestoreFromBucketRecordsHoldsTheSeenSetTheTaskHeldBeforeTheCrash(t *testing.T) {
	p, sends := expiringSends(3000)
	live := NewTask(p, testTopics, 0)
	var log []*kgo.Record
	buckets, tombstones := map[string]bool{}, 0
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(sends); {
		n := min(1+rng.IntN(300), len(sends)-i) // transactions of 1 to 300 requests
		x := feed(t, live, int64(i), sends[i:i+n])
		live.Commit()
		i += n
		log = append(log, x.seen...)
		for _, r := range x.seen {
			if _, _, ok := parseBucketKey(r.Key); ok {
				buckets[string(r.Key)] = true
				if r.Value == nil {
					tombstones++
				}
			} else if string(r.Key) != clockKey {
				t.Fatalf("record under key %q: the batched layout writes bucket records and the clock only", r.Key)
			}
		}
		// A crash after this transaction: a new task restored from the log
		// as it is, compacted, and compacted with the tombstones removed.
		for _, c := range []struct {
			what string
			log  []*kgo.Record
		}{{"the log", log}, {"the compacted log", compacted(log, true)}, {"the compacted log without tombstones", compacted(log, false)}} {
			sameSet(t, fmt.Sprintf("after request %d, restored from %s", i, c.what), restored(t, p, c.log), live)
		}
	}
	if tombstones == 0 || len(buckets) > len(sends)/3 {
		t.Fatalf("%d bucket records, %d tombstones for %d requests: want a few records and some tombstones", len(buckets), tombstones, len(sends))
	}
	// And it decides the next requests as the live task does.
	rest := restored(t, p, compacted(log, true))
	for i := range 500 {
		s := sends[len(sends)-1000+i]
		s.at = time.Duration(len(sends)+i) * 100 * time.Millisecond
		l := feed(t, live, int64(len(sends)+i), []sent{s})
		r := feed(t, rest, int64(len(sends)+i), []sent{s})
		live.Commit()
		rest.Commit()
		if fmt.Sprint(l.outcomes) != fmt.Sprint(r.outcomes) {
			t.Fatalf("request %d: restored task %v, live task %v", i, r.outcomes, l.outcomes)
		}
	}
}

func TestABucketsTombstonesRemoveExactlyItsRecordsAndItsKeysLeaveWithThem(t *testing.T) {
	p := Policy{DefaultWindowMs: 600_000, IdempotencyTTLMs: 600_000}
	live := NewTask(p, testTopics, 0)
	// Batches a minute apart, so that each bucket holds one batch's keys.
	var log []*kgo.Record
	keysOf := map[string][]string{} // bucket record key -> the dedupe keys it holds
	for sec := range 3 {
		var batch []sent
		for i := range 600 { // more than batchEntries: two records a bucket
			batch = append(batch, sent{req("t", fmt.Sprintf("k%d-%d", sec, i), ""), time.Duration(sec) * time.Minute})
		}
		x := feed(t, live, int64(sec*600), batch)
		live.Commit()
		n := 0
		for _, r := range x.seen {
			if r.Value == nil {
				t.Fatalf("batch %d: tombstone %s before any key expired", sec, r.Key)
			}
			if _, _, err := readBatch(r.Value, &live.batchM, func(m *seenpb.SeenEntry) {
				keysOf[string(r.Key)] = append(keysOf[string(r.Key)], fmt.Sprintf("%x", m.Scope))
				n++
			}); err != nil {
				t.Fatal(err)
			}
		}
		if n != 600 || len(x.seen) != 2 {
			t.Fatalf("batch %d: %d entries in %d records, want 600 in 2", sec, n, len(x.seen))
		}
		log = append(log, x.seen...)
	}
	// Stream time past the first batch's expiry (and its bucket's end):
	// its bucket's records are tombstoned, and only they.
	end := bucketEnd(taskBase.Add(10 * time.Minute).UnixMilli())
	at := time.UnixMilli(end).Sub(taskBase) + time.Duration(p.SkewAllowanceMs)*time.Millisecond
	x := feed(t, live, 1800, []sent{{req("t", "later", ""), at}})
	live.Commit()
	var tombs []string
	for _, r := range x.seen {
		if r.Value == nil {
			tombs = append(tombs, string(r.Key))
		}
	}
	var want []string
	for k := range keysOf {
		if e, _, _ := parseBucketKey([]byte(k)); e == end {
			want = append(want, k)
		}
	}
	if len(want) != 2 || fmt.Sprint(sorted(tombs)) != fmt.Sprint(sorted(want)) {
		t.Fatalf("tombstones %v, want the first bucket's records %v", tombs, want)
	}
	log = append(log, x.seen...)
	if live.Len() != 1201 {
		t.Fatalf("%d live keys, want the last two batches' 1200 and the new one", live.Len())
	}
	rest := restored(t, p, compacted(log, false))
	sameSet(t, "restored after the tombstones", rest, live)
	for k := range keysOf {
		if e, _, _ := parseBucketKey([]byte(k)); e == end {
			continue
		}
		for _, r := range compacted(log, false) {
			if string(r.Key) == k {
				goto found
			}
		}
		t.Fatalf("record %s of a live bucket was removed", k)
	found:
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestAKeySetTwiceInOneTransactionIsRestoredWithItsLaterEntry(t *testing.T) {
	p := Policy{DefaultWindowMs: 3_600_000, IdempotencyTTLMs: 3_600_000}
	x := req("x", "x", "")
	k := req("k", "k", "")
	k.DedupeWindowMs = 60_000
	again := req("k again", "k", "")
	again.DedupeWindowMs = 3_540_000 // expires with x: the bucket x opened first
	live := NewTask(p, testTopics, 0)
	tx := feed(t, live, 0, []sent{{x, 0}, {k, 0}, {again, time.Minute}})
	live.Commit()
	if fmt.Sprint(tx.outcomes) != "[accepted accepted accepted]" {
		t.Fatalf("outcomes %v, want k accepted again after its window", tx.outcomes)
	}
	rest := restored(t, p, tx.seen)
	sameSet(t, "restored", rest, live)
	probe := []sent{{req("k probe", "k", ""), 2 * time.Minute}} // inside the later window only
	if l, r := feed(t, live, 3, probe), feed(t, rest, 3, probe); fmt.Sprint(r.outcomes) != "[duplicate]" || fmt.Sprint(l.outcomes) != "[duplicate]" {
		t.Fatalf("k two minutes on: restored %v, live %v; want duplicate (the later entry)", r.outcomes, l.outcomes)
	}
}

func TestAPerKeySeenSetUpgradesToBucketsWithoutLosingAKey(t *testing.T) {
	p, sends := expiringSends(3000)
	// An earlier herald wrote the per-key layout for the first 1,500
	// requests; the upgraded one restores it and goes on in buckets.
	old := NewTask(p, testTopics, 0)
	old.SeenPerKey = true
	var log []*kgo.Record
	for i := 0; i < 1500; i += 100 {
		x := feed(t, old, int64(i), sends[i:i+100])
		old.Commit()
		log = append(log, x.seen...)
	}
	upgraded := restored(t, p, compacted(log, true))
	sameEntries(t, "the upgraded task restored from the per-key log", upgraded, old)
	for i := 1500; i < len(sends); i += 100 {
		l := feed(t, old, int64(i), sends[i:i+100])
		u := feed(t, upgraded, int64(i), sends[i:i+100])
		old.Commit()
		upgraded.Commit()
		if fmt.Sprint(l.outcomes) != fmt.Sprint(u.outcomes) {
			t.Fatalf("requests %d–%d: upgraded %v, per-key %v", i, i+99, u.outcomes, l.outcomes)
		}
		log = append(log, u.seen...)
		for _, c := range []bool{true, false} {
			sameSet(t, fmt.Sprintf("after request %d, restored from the mixed log (tombstones kept %v)", i+99, c), restored(t, p, compacted(log, c)), upgraded)
		}
	}
	// Once every per-key entry has expired, no per-key record is left.
	x := feed(t, upgraded, int64(len(sends)), []sent{{req("t", "later", ""), time.Hour}})
	upgraded.Commit()
	log = append(log, x.seen...)
	for _, r := range compacted(log, false) {
		if _, ok := parseSeenKey(r.Key); ok {
			t.Fatalf("per-key record %s left an hour after its entry expired", r.Key)
		}
	}
}

func TestABucketRecordThatIsNoSeenBatchFailsTheRestoreNamingItsKey(t *testing.T) {
	for _, v := range [][]byte{{0x1a, 0x10, 1}, {0x1a, 0x02, 0x08, 0x05}, {0x08}} { // truncated entry, an entry of unknown kind, a truncated time
		for _, key := range []string{"bucket/60000/0", clockKey} {
			task := NewTask(DefaultPolicy(), testTopics, 0)
			if err := task.Restore(&kgo.Record{Key: []byte(key), Value: v}); err == nil || !strings.Contains(err.Error(), key) {
				t.Fatalf("restore of % x under %s: %v, want an error naming the key", v, key, err)
			}
			set := NewSeenSet()
			if err := set.Apply(&kgo.Record{Key: []byte(key), Value: v}); err == nil || !strings.Contains(err.Error(), key) || set.Len() != 0 {
				t.Fatalf("seen-set copy of % x under %s: %v, want an error naming the key", v, key, err)
			}
		}
	}
}

func TestABucketRecordIsTheSeenBatchOfSeenProto(t *testing.T) {
	p, sends := expiringSends(1000)
	task := NewTask(p, testTopics, 0)
	x := feed(t, task, 0, sends)
	entries, last := 0, [2]int64{}
	for _, r := range x.seen {
		if header(r) != SeenBatchV3 {
			t.Fatalf("record %s has header %q, want %q", r.Key, header(r), SeenBatchV3)
		}
		var b seenpb.SeenBatch // the generated code of schemas/seenpb/seen.proto
		if err := proto.Unmarshal(r.Value, &b); err != nil {
			t.Fatalf("record %s: %v", r.Key, err)
		}
		end, _, _ := parseBucketKey(r.Key)
		for _, e := range b.Entries {
			if bucketEnd(e.ExpiresAt) != end {
				t.Fatalf("record %s holds an entry expiring at %d", r.Key, e.ExpiresAt)
			}
		}
		// A record written before the transaction's end carries the times
		// then; those written at its end, the final ones.
		if b.StreamTime > task.pendingStreamTime || b.SweptTo > task.pendingSweptTo {
			t.Fatalf("record %s: times %d, %d after the transaction's %d, %d", r.Key, b.StreamTime, b.SweptTo, task.pendingStreamTime, task.pendingSweptTo)
		}
		last = [2]int64{max(last[0], b.StreamTime), max(last[1], b.SweptTo)}
		entries += len(b.Entries)
	}
	if last != [2]int64{task.pendingStreamTime, task.pendingSweptTo} {
		t.Fatalf("latest times written %v, want the transaction's %d, %d", last, task.pendingStreamTime, task.pendingSweptTo)
	}
	if entries == 0 || len(x.seen) >= entries/10 {
		t.Fatalf("%d entries in %d records", entries, len(x.seen))
	}
}

func TestABucketRecordStaysSmallWhateverTheRequestIDs(t *testing.T) {
	p := Policy{DefaultWindowMs: 600_000, IdempotencyTTLMs: 600_000}
	task := NewTask(p, testTopics, 0)
	var batch []sent
	for i := range 200 {
		r := req("t", fmt.Sprintf("k%d", i), "")
		r.RequestID = strings.Repeat("x", 4000) // not a herald id: kept as text
		batch = append(batch, sent{r, 0})
	}
	x := feed(t, task, 0, batch)
	entries := 0
	for _, r := range x.seen {
		n, err := SeenEntries(r)
		if err != nil {
			t.Fatal(err)
		}
		entries += n
		if len(r.Value) > batchBytes+5000 {
			t.Fatalf("record %s of %d entries has %d bytes", r.Key, n, len(r.Value))
		}
	}
	if entries != 200 || len(x.seen) < 200*4000/batchBytes {
		t.Fatalf("%d entries in %d records", entries, len(x.seen))
	}
}
