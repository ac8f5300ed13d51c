package dedupe

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

// decisionOf returns the decision among records.
func decisionOf(t *testing.T, recs []*kgo.Record) schemas.Decision {
	t.Helper()
	for _, r := range recs {
		if r.Topic == "decisions" {
			var d schemas.Decision
			if err := schemas.Decode(r.Value, &d); err != nil {
				t.Fatal(err)
			}
			return d
		}
	}
	t.Fatal("no decision emitted")
	return schemas.Decision{}
}

// seenRecord is the herald.seen record of e under its key.
func seenRecord(t *testing.T, e schemas.SeenEntry) *kgo.Record {
	t.Helper()
	b, err := schemas.Encode(&e)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: "seen", Key: []byte(schemas.SeenKey(e.Kind, e.Scope)), Value: b}
}

// The seen-set keeps ids, request ids and content hashes as bytes; these
// entries hold values that have no such form, restored from herald.seen
// as another version or producer could have written them.
func TestRestoredEntriesKeepFieldsThatHaveNoFixedForm(t *testing.T) {
	p := Policy{DefaultWindowMs: 60_000, IdempotencyTTLMs: 60_000}
	r := req("paid", "", "evt_1")
	idem := func(mod func(*schemas.SeenEntry)) schemas.SeenEntry {
		e := schemas.SeenEntry{Kind: schemas.SeenIdempotency, Scope: r.NotificationID, NotificationID: r.NotificationID,
			RequestID: strings.ToUpper(r.RequestID), ContentHash: r.ContentHash(), Outcome: schemas.DecisionAccepted,
			FirstAt: taskBase.UnixMilli(), ExpiresAt: taskBase.UnixMilli() + 60_000, SourcePartition: 3, SourceOffset: 0}
		mod(&e)
		return e
	}
	cases := []struct {
		name     string
		entry    schemas.SeenEntry
		outcome  string
		original schemas.Decision
	}{
		{"a request id that is not a herald id is answered as written",
			idem(func(e *schemas.SeenEntry) { e.RequestID = "call #1" }), schemas.DecisionIdempotentReplay,
			schemas.Decision{OriginalRequestID: "call #1", OriginalNotificationID: r.NotificationID, OriginalOutcome: schemas.DecisionAccepted}},
		{"an upper-case request id stays upper case",
			idem(func(*schemas.SeenEntry) {}), schemas.DecisionIdempotentReplay,
			schemas.Decision{OriginalRequestID: strings.ToUpper(r.RequestID), OriginalNotificationID: r.NotificationID, OriginalOutcome: schemas.DecisionAccepted}},
		{"a notification id that is not a herald id is answered as written",
			idem(func(e *schemas.SeenEntry) { e.NotificationID = "legacy-7" }), schemas.DecisionIdempotentReplay,
			schemas.Decision{OriginalRequestID: strings.ToUpper(r.RequestID), OriginalNotificationID: "legacy-7", OriginalOutcome: schemas.DecisionAccepted}},
		{"an outcome other than accepted or duplicate is replayed as written",
			idem(func(e *schemas.SeenEntry) { e.Outcome = "deferred_by_v0" }), schemas.DecisionIdempotentReplay,
			schemas.Decision{OriginalRequestID: strings.ToUpper(r.RequestID), OriginalNotificationID: r.NotificationID, OriginalOutcome: "deferred_by_v0"}},
		{"a duplicate outcome is replayed",
			idem(func(e *schemas.SeenEntry) { e.Outcome = schemas.DecisionDuplicate }), schemas.DecisionIdempotentReplay,
			schemas.Decision{OriginalRequestID: strings.ToUpper(r.RequestID), OriginalNotificationID: r.NotificationID, OriginalOutcome: schemas.DecisionDuplicate}},
		{"a content hash in upper case does not match the request's",
			idem(func(e *schemas.SeenEntry) { e.ContentHash = strings.ToUpper(e.ContentHash) }), schemas.DecisionIdempotencyConflict,
			schemas.Decision{OriginalRequestID: strings.ToUpper(r.RequestID), OriginalNotificationID: r.NotificationID, OriginalOutcome: schemas.DecisionAccepted}},
		{"an entry without a content hash is a conflict",
			idem(func(e *schemas.SeenEntry) { e.ContentHash = "" }), schemas.DecisionIdempotencyConflict,
			schemas.Decision{OriginalRequestID: strings.ToUpper(r.RequestID), OriginalNotificationID: r.NotificationID, OriginalOutcome: schemas.DecisionAccepted}},
		{"a content hash of another request is a conflict",
			idem(func(e *schemas.SeenEntry) { e.ContentHash = req("other", "", "evt_1").ContentHash() }), schemas.DecisionIdempotencyConflict,
			schemas.Decision{OriginalRequestID: strings.ToUpper(r.RequestID), OriginalNotificationID: r.NotificationID, OriginalOutcome: schemas.DecisionAccepted}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task := restored(t, p, []*kgo.Record{seenRecord(t, c.entry)})
			if v2, err := schemas.AppendSeenV2(nil, &c.entry); err == nil {
				// The same entry in herald.seen/v2, where it has that form,
				// answers the same.
				rec := seenRecord(t, c.entry)
				rec.Value = v2
				d1 := decisionOf(t, process(t, task, r, 9, taskBase.Add(time.Second)))
				d2 := decisionOf(t, process(t, restored(t, p, []*kgo.Record{rec}), r, 9, taskBase.Add(time.Second)))
				if !reflect.DeepEqual(d1, d2) {
					t.Fatalf("restored from herald.seen/v2: %+v, from JSON: %+v", d2, d1)
				}
				task = restored(t, p, []*kgo.Record{rec})
			}
			d := decisionOf(t, process(t, task, r, 9, taskBase.Add(time.Second)))
			if d.Outcome != c.outcome || d.OriginalRequestID != c.original.OriginalRequestID ||
				d.OriginalNotificationID != c.original.OriginalNotificationID || d.OriginalOutcome != c.original.OriginalOutcome ||
				d.OriginalAt != c.entry.FirstAt {
				t.Fatalf("decision %s (original request %q, notification %q, outcome %q, at %d), want %s with %+v at %d",
					d.Outcome, d.OriginalRequestID, d.OriginalNotificationID, d.OriginalOutcome, d.OriginalAt, c.outcome, c.original, c.entry.FirstAt)
			}
			// The public Decide over the same entry answers the same.
			res := p.Decide(r, taskBase.Add(time.Second).UnixMilli(), Source{Topic: "requests", Partition: 3, Offset: 9},
				func(key string) (schemas.SeenEntry, bool) { return c.entry, key == string(seenRecord(t, c.entry).Key) })
			if res.Decision.Outcome != d.Outcome || res.Decision.OriginalRequestID != d.OriginalRequestID ||
				res.Decision.OriginalNotificationID != d.OriginalNotificationID || res.Decision.OriginalOutcome != d.OriginalOutcome {
				t.Fatalf("Decide answered %+v, the task %+v", res.Decision, d)
			}
		})
	}
}

// A changelog written as JSON (herald.seen/v1, --seen-format json) and
// one written as herald.seen/v2 restore the same seen-set.
func TestBothSeenFormatsRestoreTheSameSeenSet(t *testing.T) {
	p := Policy{DefaultWindowMs: 60_000, IdempotencyTTLMs: 120_000}
	reqs, _ := crashWorkload(rand.New(rand.NewPCG(3, 4)))
	reqs = reqs[:2000]
	reqs[7].RequestID = "call #7, not a herald id"
	reqs[7].IdempotencyKey = "evt_7"
	sends := make([]sent, len(reqs))
	for i, r := range reqs {
		sends[i] = sent{r, time.Duration(i) * 100 * time.Millisecond} // 200 s: some keys expire
	}
	logs := map[bool][]*kgo.Record{}
	for _, seenJSON := range []bool{false, true} {
		task := NewTask(p, testTopics, 0)
		task.SeenJSON, task.SeenPerKey = seenJSON, true
		for i := 0; i < len(sends); i += 100 {
			x := feed(t, task, int64(i), sends[i:i+100])
			task.Commit()
			logs[seenJSON] = append(logs[seenJSON], x.seen...)
		}
	}
	if len(logs[false]) != len(logs[true]) {
		t.Fatalf("%d herald.seen/v2 records, %d JSON ones", len(logs[false]), len(logs[true]))
	}
	texts := 0
	for i, r := range logs[false] {
		if string(r.Key) != string(logs[true][i].Key) || (r.Value == nil) != (logs[true][i].Value == nil) {
			t.Fatalf("record %d: key %s, JSON's %s", i, r.Key, logs[true][i].Key)
		}
		var e schemas.SeenEntry
		if r.Value != nil {
			if schemas.IsJSON(r.Value) || !schemas.IsJSON(logs[true][i].Value) {
				t.Fatalf("record %d: not one of each format", i)
			}
			if err := schemas.Decode(r.Value, &e); err != nil {
				t.Fatal(err)
			}
			if e.RequestID == reqs[7].RequestID {
				texts++
			}
		}
	}
	if texts == 0 {
		t.Fatal("no entry kept the request id that is not a herald id")
	}
	v2, v1 := restored(t, p, logs[false]), restored(t, p, logs[true])
	if v2.Len() != v1.Len() || v2.Len() == 0 {
		t.Fatalf("restored %d keys from herald.seen/v2, %d from JSON", v2.Len(), v1.Len())
	}
	for _, r := range logs[false] {
		k, _ := parseSeenKey(r.Key)
		val2, s2, ok2 := v2.get(k)
		val1, s1, ok1 := v1.get(k)
		if val2 != val1 || s2 != s1 || ok2 != ok1 {
			t.Fatalf("key %s: from herald.seen/v2 %+v %+v %v, from JSON %+v %+v %v", r.Key, val2, s2, ok2, val1, s1, ok1)
		}
	}
}

func TestARequestIDThatIsNotAHeraldIDSurvivesTheSeenSet(t *testing.T) {
	p := Policy{DefaultWindowMs: 60_000, IdempotencyTTLMs: 60_000}
	first := req("paid", "inv_1", "evt_1")
	first.RequestID = "call #1 from the billing service"
	retry := first
	retry.RequestID = "call #2"
	live := NewTask(p, testTopics, 0)
	x := feed(t, live, 0, []sent{{first, 0}})
	live.Commit()
	for _, c := range []struct {
		name string
		task *Task
	}{{"in the live task", live}, {"in a task restored from the changelog", restored(t, p, x.seen)}} {
		t.Run(c.name, func(t *testing.T) {
			d := decisionOf(t, process(t, c.task, retry, 1, taskBase.Add(time.Second)))
			if d.Outcome != schemas.DecisionIdempotentReplay || d.OriginalRequestID != first.RequestID {
				t.Fatalf("decision %s with original request %q, want a replay of %q", d.Outcome, d.OriginalRequestID, first.RequestID)
			}
		})
	}
}

func TestEntriesUnderKeysOfAnotherFormAreSkipped(t *testing.T) {
	e := schemas.SeenEntry{Kind: schemas.SeenDedupe, Scope: "x", NotificationID: "n", RequestID: "r", Outcome: schemas.DecisionAccepted, ExpiresAt: 1}
	b, _ := schemas.Encode(&e)
	for _, key := range []string{"dedupe:0123456789abcdef0123456789abcdef", "other/0123456789abcdef0123456789abcdef", "dedupe/0123", "idem/0123456789ABCDEF0123456789ABCDEF", "0123456789abcdef0123456789abcdef"} {
		t.Run(key, func(t *testing.T) {
			task := NewTask(DefaultPolicy(), testTopics, 0)
			if err := task.Restore(&kgo.Record{Key: []byte(key), Value: b}); err != nil {
				t.Fatal(err)
			}
			if task.Len() != 0 {
				t.Fatalf("restored %d entries from key %q", task.Len(), key)
			}
		})
	}
	t.Run("while both kinds of key are restored", func(t *testing.T) {
		task := NewTask(DefaultPolicy(), testTopics, 0)
		for _, key := range []string{"dedupe/0123456789abcdef0123456789abcdef", "idem/0123456789abcdef0123456789abcdef"} {
			if err := task.Restore(&kgo.Record{Key: []byte(key), Value: b}); err != nil {
				t.Fatal(err)
			}
		}
		if task.Len() != 2 {
			t.Fatalf("restored %d entries, want 2 (one per kind)", task.Len())
		}
	})
}

func TestASeenSetLookupDoesNotAllocate(t *testing.T) {
	p := Policy{DefaultWindowMs: 60_000, IdempotencyTTLMs: 60_000}
	odd := req("paid", "inv_1", "evt_1")
	odd.RequestID = "not a herald id"
	task := NewTask(p, testTopics, 0)
	feed(t, task, 0, []sent{{req("paid", "inv_2", "evt_2"), 0}, {odd, 0}})
	task.Commit()
	keys := []seenKey{}
	for kind := kindIdem; kind <= kindDedupe; kind++ {
		tb := task.table(kind)
		for pos := range tb.used {
			if id, ok := tb.keyAt(pos); ok {
				keys = append(keys, seenKey{id: id, kind: kind})
			}
		}
	}
	if len(keys) != 4 {
		t.Fatalf("%d keys committed, want 4", len(keys))
	}
	if n := testing.AllocsPerRun(100, func() {
		for _, k := range keys {
			if _, _, ok := task.get(k); !ok {
				t.Fatal("a committed key is missing")
			}
		}
	}); n != 0 {
		t.Fatalf("%v allocations per lookup round, want 0", n)
	}
}

func TestKeysAreDerivedWhateverTheIDSourceSays(t *testing.T) {
	p := Policy{DefaultWindowMs: 60_000, IdempotencyTTLMs: 60_000}
	random := func(dedupeKey, idemKey string) schemas.Request {
		r := req("paid", dedupeKey, idemKey)
		r.IDSource, r.NotificationID = "random", identity.NewRandomID()
		return r
	}
	emptyDedupe := req("paid", "", "")
	emptyDedupe.IDSource, emptyDedupe.NotificationID = "dedupe_key", identity.DedupeID(emptyDedupe.Tenant, emptyDedupe.Type, emptyDedupe.Recipient, "")
	emptyIdem := req("paid", "", "")
	emptyIdem.IDSource, emptyIdem.NotificationID = "idempotency_key", identity.IdempotencyID(emptyIdem.Tenant, emptyIdem.Type, emptyIdem.Recipient, "")
	cases := []struct {
		name string
		reqs []sent
		want string
	}{
		{"random ids with two dedupe keys are two notifications", []sent{{random("k1", ""), 0}, {random("k2", ""), time.Second}}, "[accepted accepted]"},
		{"random ids with one dedupe key are one notification", []sent{{random("k1", ""), 0}, {random("k1", ""), time.Second}}, "[accepted duplicate]"},
		{"random ids with two idempotency keys are two notifications", []sent{{random("", "i1"), 0}, {random("", "i2"), time.Second}}, "[accepted accepted]"},
		{"random ids with one idempotency key are one call", []sent{{random("", "i1"), 0}, {random("", "i1"), time.Second}}, "[accepted idempotent_replay]"},
		{"the id of an empty dedupe key is that key's id", []sent{{emptyDedupe, 0}}, "[accepted]"},
		{"the id of an empty idempotency key is that key's id", []sent{{emptyIdem, 0}}, "[accepted]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _, _ := runTask(t, p, c.reqs)
			if fmt.Sprint(got) != c.want {
				t.Fatalf("outcomes %v, want %s", got, c.want)
			}
		})
	}
}

// TestAFewAllocationsPerRequest holds the task to the budget of
// at most five allocations per request (an allocation count, not a
// timing): records, keys and values come from slabs, strings of the
// decoded request share one copy, lookups allocate nothing.
func TestAFewAllocationsPerRequest(t *testing.T) {
	reqs, _ := crashWorkload(rand.New(rand.NewPCG(3, 4)))
	recs := make([]*kgo.Record, 4000)
	for i := range recs {
		v, _ := schemas.Encode(reqs[i])
		recs[i] = &kgo.Record{Topic: "requests", Value: v, Offset: int64(i), Timestamp: taskBase.Add(time.Duration(i) * time.Millisecond)}
	}
	task := NewTask(DefaultPolicy(), testTopics, 0)
	out := new(stage.Out)
	i := 0
	step := func() {
		if err := task.Process(recs[i], out); err != nil {
			t.Fatal(err)
		}
		i++
		if i%500 == 0 {
			task.Commit()
			out = new(stage.Out)
		}
	}
	for range 1000 { // warm up: slabs, maps and pools in use
		step()
	}
	if n := testing.AllocsPerRun(2000, step); n > 5 {
		t.Fatalf("%.1f allocations per request, want at most 5", n)
	}
}
