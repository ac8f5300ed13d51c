package dedupe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/reply"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

// These tests drive a Task the way the stage runtime does: many records in
// one transaction (production commits up to 2,000 at a time), then Commit or
// Abort, and a fresh Task restored from the seen-set changelog.

var taskBase = time.UnixMilli(1_764_500_000_000)

// txn is the output of one transaction of a Task.
type txn struct {
	outcomes   []string
	accepted   []string
	seen       []*kgo.Record // changelog records, tombstones included
	tombstones []string      // keys
}

// stored is r as the broker stores it: its key and value copied out of the
// task's slab, which the task reuses after the transaction ends.
func stored(r *kgo.Record) *kgo.Record {
	c := *r
	c.Key, c.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
	return &c
}

// feed processes reqs, in order, as one transaction starting at offset
// first, each at its record time, and returns what the transaction emits.
// It neither commits nor aborts.
func feed(t *testing.T, task *Task, first int64, reqs []sent) txn {
	t.Helper()
	var out stage.Out
	for i, s := range reqs {
		b, err := schemas.Encode(s.r)
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: "requests", Key: []byte(s.r.NotificationID), Value: b, Offset: first + int64(i), Timestamp: taskBase.Add(s.at)}
		if err := task.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
	}
	task.Tick(&out) // as the runtime does, after the batch
	var x txn
	for _, o := range outRecords(&out) {
		switch o.Topic {
		case "decisions":
			var d schemas.Decision
			if err := schemas.Decode(o.Value, &d); err != nil {
				t.Fatal(err)
			}
			x.outcomes = append(x.outcomes, d.Outcome)
		case "accepted":
			var a schemas.Accepted
			if err := schemas.Decode(o.Value, &a); err != nil {
				t.Fatal(err)
			}
			x.accepted = append(x.accepted, a.NotificationID)
		case "seen":
			x.seen = append(x.seen, stored(o))
			if o.Value == nil {
				x.tombstones = append(x.tombstones, string(o.Key))
			}
		}
	}
	return x
}

func TestRepeatsInsideOneTransactionAreCaughtBeforeItCommits(t *testing.T) {
	webhook := req("paid", "", "evt_1")
	otherPayload := webhook
	otherPayload.Payload = json.RawMessage(`{"amount":2}`)
	twoPaths := req("paid", "inv_7", "")
	both := req("paid", "inv_9", "evt_9")
	bothOtherCall := req("paid", "inv_9", "evt_10")
	cases := []struct {
		name string
		reqs []sent
		want []string
	}{
		{"an idempotency key sent twice in one transaction is replayed the second time",
			[]sent{{webhook, 0}, {webhook, time.Second}}, []string{"accepted", "idempotent_replay"}},
		{"an idempotency key reused with another payload in one transaction is a conflict",
			[]sent{{webhook, 0}, {otherPayload, time.Second}}, []string{"accepted", "idempotency_conflict"}},
		{"a dedupe key sent twice in one transaction is a duplicate the second time",
			[]sent{{twoPaths, 0}, {req("paid again", "inv_7", ""), time.Second}}, []string{"accepted", "duplicate"}},
		{"a duplicate's own idempotency key replays as a duplicate within the same transaction",
			[]sent{{both, 0}, {bothOtherCall, time.Second}, {bothOtherCall, 2 * time.Second}},
			[]string{"accepted", "duplicate", "idempotent_replay"}},
		{"a dedupe key whose window ended inside the transaction is new again",
			[]sent{{twoPaths, 0}, {twoPaths, time.Minute}}, []string{"accepted", "accepted"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task := NewTask(seedPolicy, testTopics, 0)
			x := feed(t, task, 0, c.reqs)
			if fmt.Sprint(x.outcomes) != fmt.Sprint(c.want) {
				t.Fatalf("outcomes in one transaction = %v, want %v", x.outcomes, c.want)
			}
			// Committed at once or one by one, the decisions are the same.
			got, _, _ := runTask(t, seedPolicy, c.reqs)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("outcomes committed one by one = %v, want %v", got, c.want)
			}
		})
	}
}

func TestAnAbortedTransactionIsReplayedAgainstTheCommittedState(t *testing.T) {
	p := Policy{DefaultWindowMs: 1000, IdempotencyTTLMs: 5000}
	task := NewTask(p, testTopics, 0)
	task.SeenPerKey = true // k1's expiry is a tombstone of its own
	k1 := req("a", "k1", "i1")
	feed(t, task, 0, []sent{{k1, 0}})
	task.Commit()
	committed := task.Len()

	// One transaction: a repeat of k1 inside its window, a new key, then a
	// record past k1's window that tombstones it.
	batch := []sent{{k1, 500 * time.Millisecond}, {req("b", "k2", ""), 600 * time.Millisecond}, {req("c", "k3", ""), 1000 * time.Millisecond}}
	first := feed(t, task, 1, batch)
	task.Abort()
	if task.Len() != committed {
		t.Fatalf("after abort %d entries, want the %d committed", task.Len(), committed)
	}
	// The session rewinds the input: the same records come again and must
	// produce the same transaction, tombstones included.
	again := feed(t, task, 1, batch)
	if fmt.Sprint(again.outcomes) != fmt.Sprint(first.outcomes) || fmt.Sprint(again.tombstones) != fmt.Sprint(first.tombstones) {
		t.Fatalf("replayed after abort: outcomes %v tombstones %v; first attempt: outcomes %v tombstones %v",
			again.outcomes, again.tombstones, first.outcomes, first.tombstones)
	}
	if want := []string{"idempotent_replay", "accepted", "accepted"}; fmt.Sprint(again.outcomes) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", again.outcomes, want)
	}
	if len(again.tombstones) != 1 {
		t.Fatalf("tombstones %v, want k1's dedupe entry", again.tombstones)
	}
	task.Commit()
	if task.Len() != 3 { // i1, k2, k3
		t.Fatalf("after commit %d entries, want 3 (i1, k2, k3)", task.Len())
	}
}

func TestAnAbortRewindsStreamTime(t *testing.T) {
	p := Policy{DefaultWindowMs: 1000, IdempotencyTTLMs: 1000}
	task := NewTask(p, testTopics, 0)
	feed(t, task, 0, []sent{{req("a", "k1", ""), 0}})
	task.Commit()
	// A record far in the future is aborted: its stream time must not
	// expire k1 for the records that follow.
	feed(t, task, 1, []sent{{req("b", "k2", ""), time.Hour}})
	task.Abort()
	x := feed(t, task, 1, []sent{{req("a", "k1", ""), 500 * time.Millisecond}})
	if fmt.Sprint(x.outcomes) != "[duplicate]" || len(x.tombstones) != 0 {
		t.Fatalf("after the abort: outcomes %v tombstones %v, want k1 still a duplicate and nothing expired", x.outcomes, x.tombstones)
	}
}

// restored builds a fresh task from the changelog records of others.
func restored(t *testing.T, p Policy, logs ...[]*kgo.Record) *Task {
	t.Helper()
	task := NewTask(p, testTopics, 0)
	for _, log := range logs {
		for _, r := range log {
			if err := task.Restore(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	return task
}

func TestARestoredTaskDecidesLikeTheLiveOne(t *testing.T) {
	p := Policy{DefaultWindowMs: 1000, IdempotencyTTLMs: 3000}
	history := []sent{
		{req("a", "k1", "i1"), 0},
		{req("b", "k2", ""), 200 * time.Millisecond},
		{req("c", "k3", "i3"), 1500 * time.Millisecond}, // expires k1 (tombstone)
	}
	live := NewTask(p, testTopics, 0)
	var log []*kgo.Record
	for i, s := range history {
		x := feed(t, live, int64(i), []sent{s})
		live.Commit()
		log = append(log, x.seen...)
	}
	rest := restored(t, p, log)
	if rest.Len() != live.Len() {
		t.Fatalf("restored %d entries, live task has %d", rest.Len(), live.Len())
	}
	next := []sent{
		{req("a", "k1", "i1"), 1600 * time.Millisecond},   // k1 expired, i1 live: a replay
		{req("b", "k2", ""), 1700 * time.Millisecond},     // k2 expired by stream time: new
		{req("c", "k3", "i3b"), 1800 * time.Millisecond},  // k3 live: a duplicate
		{req("d", "k4", "i1"), 3100 * time.Millisecond},   // i1 expired: new
		{req("c", "k3", "i3"), 3200 * time.Millisecond},   // k3 expired, i3 live: a replay
		{req("e", "", "i3"), 4600 * time.Millisecond},     // i3 expired: a new notification
		{req("b", "k2", ""), 4700 * time.Millisecond},     // k2 (from 1700) expired: new
		{req("after", "k5", ""), 4700 * time.Millisecond}, // new
		{req("after", "k5", ""), 5699 * time.Millisecond}, // inside k5's window
		{req("later", "k5", ""), 5700 * time.Millisecond}, // at its end
	}
	for i, s := range next {
		l := feed(t, live, int64(len(history)+i), []sent{s})
		r := feed(t, rest, int64(len(history)+i), []sent{s})
		live.Commit()
		rest.Commit()
		if fmt.Sprint(l.outcomes, l.tombstones) != fmt.Sprint(r.outcomes, r.tombstones) {
			t.Fatalf("request %d (%s at %v): restored task gave %v tombstones %v, live task %v tombstones %v",
				i, s.r.Title, s.at, r.outcomes, r.tombstones, l.outcomes, l.tombstones)
		}
	}
	want := []string{"idempotent_replay", "accepted", "duplicate", "accepted", "idempotent_replay", "accepted", "accepted", "accepted", "duplicate", "accepted"}
	var got []string
	rest2 := restored(t, p, log)
	for i, s := range next {
		x := feed(t, rest2, int64(len(history)+i), []sent{s})
		rest2.Commit()
		got = append(got, x.outcomes...)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored task outcomes %v, want %v", got, want)
	}
}

func TestRestoreAppliesTombstonesAndKeepsTheLatestEntry(t *testing.T) {
	p := Policy{DefaultWindowMs: 60_000, IdempotencyTTLMs: 60_000}
	live := NewTask(p, testTopics, 0)
	live.SeenPerKey = true // the layout of herald.seen/v2 and v1, which a restore still reads
	x := feed(t, live, 0, []sent{{req("a", "k1", ""), 0}, {req("b", "k2", ""), 0}})
	if len(x.seen) != 2 {
		t.Fatalf("changelog %d records, want 2", len(x.seen))
	}
	k1 := x.seen[0]
	tomb := &kgo.Record{Topic: "seen", Key: k1.Key}

	t.Run("a tombstone deletes the entry it follows", func(t *testing.T) {
		task := restored(t, p, x.seen, []*kgo.Record{tomb})
		if task.Len() != 1 {
			t.Fatalf("restored %d entries, want 1 (k2)", task.Len())
		}
		y := feed(t, task, 2, []sent{{req("a", "k1", ""), time.Second}, {req("b", "k2", ""), time.Second}})
		if fmt.Sprint(y.outcomes) != "[accepted duplicate]" {
			t.Fatalf("outcomes %v, want k1 new again (deleted) and k2 a duplicate", y.outcomes)
		}
	})
	t.Run("an entry written again after its tombstone is live", func(t *testing.T) {
		task := restored(t, p, x.seen, []*kgo.Record{tomb, k1})
		if task.Len() != 2 {
			t.Fatalf("restored %d entries, want 2", task.Len())
		}
		y := feed(t, task, 2, []sent{{req("a", "k1", ""), time.Second}})
		if fmt.Sprint(y.outcomes) != "[duplicate]" {
			t.Fatalf("outcomes %v, want k1 a duplicate", y.outcomes)
		}
	})
	t.Run("a record that is not a seen entry fails the restore", func(t *testing.T) {
		for _, v := range [][]byte{[]byte("{"), {0x12, 0x10, 1}, {0x08, 0x05}, {0x08, 0x02}} { // JSON, truncated, unknown kind, no scope
			task := NewTask(p, testTopics, 0)
			key := x.seen[0].Key
			if err := task.Restore(&kgo.Record{Key: key, Value: v}); err == nil || !strings.Contains(err.Error(), string(key)) {
				t.Fatalf("restore of % x: %v, want an error naming the key", v, err)
			}
		}
	})
	t.Run("restored entries expire on the stream time that follows", func(t *testing.T) {
		task := restored(t, p, x.seen)
		y := feed(t, task, 2, []sent{{req("c", "k3", ""), time.Minute}})
		slices.Sort(y.tombstones)
		want := []string{string(x.seen[0].Key), string(x.seen[1].Key)}
		slices.Sort(want)
		if fmt.Sprint(y.tombstones) != fmt.Sprint(want) {
			t.Fatalf("tombstones %v, want both restored entries %v", y.tombstones, want)
		}
	})
}

// canonical builds a request whose id is the canonical id of (type,
// recipient, key), as the SDK does for a send with a key and no dedupeKey.
func canonical(t *testing.T, tenant, title string, key string) schemas.Request {
	t.Helper()
	r := req(title, "", "")
	r.Tenant = tenant
	id, err := identity.NotificationIDFromJSON(r.Type, r.Recipient, key)
	if err != nil {
		t.Fatal(err)
	}
	r.IDSource, r.NotificationID, r.Key = "key", id, json.RawMessage(key)
	return r
}

func TestTheCanonicalIDDeduplicatesPerTenant(t *testing.T) {
	cases := []struct {
		name string
		reqs []schemas.Request
		want []string
	}{
		{"a second send with the same key is a duplicate",
			[]schemas.Request{canonical(t, "acme", "a", `{"invoice":7}`), canonical(t, "acme", "b", `{"invoice":7}`)},
			[]string{"accepted", "duplicate"}},
		{"another key is another notification",
			[]schemas.Request{canonical(t, "acme", "a", `{"invoice":7}`), canonical(t, "acme", "a", `{"invoice":8}`)},
			[]string{"accepted", "accepted"}},
		{"the same key in another tenant is another notification",
			[]schemas.Request{canonical(t, "acme", "a", `{"invoice":7}`), canonical(t, "globex", "a", `{"invoice":7}`)},
			[]string{"accepted", "accepted"}},
		{"random ids never deduplicate",
			[]schemas.Request{req("a", "", ""), req("a", "", "")},
			[]string{"accepted", "accepted"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var reqs []sent
			for i, r := range c.reqs {
				reqs = append(reqs, sent{r, time.Duration(i) * time.Second})
			}
			got, _, _ := runTask(t, DefaultPolicy(), reqs)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("outcomes %v, want %v", got, c.want)
			}
		})
	}
}

func TestWhatTheSeenSetKeepsOfARequestOutlivesTheRecordItWasReadFrom(t *testing.T) {
	// The task reads requests in place (their strings point into the
	// record's value); a request id that is not an id is kept as text, so
	// it must be a copy: the record's buffer is dropped or reused once the
	// transaction ends.
	for _, commit := range []bool{false, true} {
		name := "within the transaction"
		if commit {
			name = "after the transaction commits"
		}
		t.Run("a duplicate names its original's request id "+name, func(t *testing.T) {
			first := req("paid", "inv_1", "")
			first.RequestID = "call #1 from the billing service"
			retry := req("paid", "inv_1", "")
			task := NewTask(DefaultPolicy(), testTopics, 0)
			var out stage.Out
			b, _ := schemas.Encode(first)
			rec := &kgo.Record{Topic: "requests", Value: b, Timestamp: taskBase}
			if err := task.Process(rec, &out); err != nil {
				t.Fatal(err)
			}
			if commit {
				task.Commit()
			}
			for i := range b {
				b[i] = 'x'
			}
			b, _ = schemas.Encode(retry)
			out = stage.Out{}
			if err := task.Process(&kgo.Record{Topic: "requests", Value: b, Offset: 1, Timestamp: taskBase.Add(time.Second)}, &out); err != nil {
				t.Fatal(err)
			}
			var d schemas.Decision
			if err := schemas.Decode(outRecords(&out)[0].Value, &d); err != nil {
				t.Fatal(err)
			}
			if d.Outcome != schemas.DecisionDuplicate || d.OriginalRequestID != first.RequestID {
				t.Fatalf("retry decided %s naming request %q, want duplicate naming %q", d.Outcome, d.OriginalRequestID, first.RequestID)
			}
		})
	}
}

func TestADecisionIsAnsweredOnTheReplyPartitionTheRequestNamed(t *testing.T) {
	topics := Topics{Requests: "requests", Decisions: "decisions", Seen: "seen", Accepted: "accepted", Replies: "replies", ReplyPartitions: 4}
	process := func(t *testing.T, task *Task, r schemas.Request, off int64, hs []kgo.RecordHeader) []*kgo.Record {
		t.Helper()
		b, err := schemas.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		var out stage.Out
		rec := &kgo.Record{Topic: "requests", Partition: 3, Key: []byte(r.NotificationID), Value: b, Offset: off, Timestamp: taskBase, Headers: hs}
		if err := task.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
		recs := make([]*kgo.Record, 0, out.Len())
		for _, o := range outRecords(&out) {
			recs = append(recs, stored(o))
		}
		task.Commit()
		return recs
	}
	on := func(recs []*kgo.Record, topic string) []*kgo.Record {
		var got []*kgo.Record
		for _, r := range recs {
			if r.Topic == topic {
				got = append(got, r)
			}
		}
		return got
	}
	t.Run("an accepted request's decision is copied to the named partition, and the accepted notification carries the name on", func(t *testing.T) {
		task := NewTask(DefaultPolicy(), topics, 3)
		recs := process(t, task, req("a", "k1", ""), 0, reply.AppendHeader(nil, 2))
		dec, rep, acc := on(recs, "decisions"), on(recs, "replies"), on(recs, "accepted")
		if len(dec) != 1 || len(rep) != 1 || len(acc) != 1 {
			t.Fatalf("%d decisions, %d replies, %d accepted; want one each", len(dec), len(rep), len(acc))
		}
		if rep[0].Partition != 2 || !bytes.Equal(rep[0].Value, dec[0].Value) || !bytes.Equal(rep[0].Key, dec[0].Key) {
			t.Fatalf("reply on partition %d, same value %v; want partition 2 and the decision's value", rep[0].Partition, bytes.Equal(rep[0].Value, dec[0].Value))
		}
		if p, ok := reply.FromHeaders(acc[0].Headers); !ok || p != 2 {
			t.Fatalf("the accepted notification names reply partition %d (%v), want 2", p, ok)
		}
	})
	t.Run("a duplicate is answered too", func(t *testing.T) {
		task := NewTask(DefaultPolicy(), topics, 3)
		process(t, task, req("a", "k1", ""), 0, nil)
		recs := process(t, task, req("a", "k1", ""), 1, reply.AppendHeader(nil, 1))
		rep := on(recs, "replies")
		var d schemas.Decision
		if len(rep) != 1 || schemas.Decode(rep[0].Value, &d) != nil || d.Outcome != schemas.DecisionDuplicate || rep[0].Partition != 1 {
			t.Fatalf("replies %d (%+v); want one duplicate decision on partition 1", len(rep), d)
		}
	})
	t.Run("a request that names no partition, or one the topic does not have, is not answered", func(t *testing.T) {
		task := NewTask(DefaultPolicy(), topics, 3)
		for i, hs := range [][]kgo.RecordHeader{nil, reply.AppendHeader(nil, 4)} {
			recs := process(t, task, req("a", fmt.Sprint("k", i), ""), int64(i), hs)
			if n := len(on(recs, "replies")); n != 0 || len(on(recs, "decisions")) != 1 {
				t.Fatalf("request %d: %d replies, want none and its decision", i, n)
			}
			for _, a := range on(recs, "accepted") {
				if _, ok := reply.FromHeaders(a.Headers); ok {
					t.Fatalf("request %d: the accepted notification names a reply partition", i)
				}
			}
		}
	})
	t.Run("a task without a replies topic (a replay's sandbox) answers nothing", func(t *testing.T) {
		sandbox := topics
		sandbox.Replies = ""
		task := NewTask(DefaultPolicy(), sandbox, 3)
		if n := len(on(process(t, task, req("a", "k1", ""), 0, reply.AppendHeader(nil, 2)), "replies")); n != 0 {
			t.Fatalf("%d replies, want none", n)
		}
	})
}

func TestAnExplainIsAnsweredAsTheRequestWouldBeAndChangesNothing(t *testing.T) {
	topics := Topics{Requests: "requests", Decisions: "decisions", Seen: "seen", Accepted: "accepted", Replies: "replies", ReplyPartitions: 4}
	explainHeaders := append(reply.AppendHeader(nil, 1), kgo.RecordHeader{Key: reply.ExplainHeader, Value: []byte("1")})
	run := func(t *testing.T, task *Task, r schemas.Request, off int64, at time.Duration, hs []kgo.RecordHeader) []*kgo.Record {
		t.Helper()
		b, err := schemas.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		var out stage.Out
		rec := &kgo.Record{Topic: "requests", Partition: 3, Key: []byte(r.NotificationID), Value: b, Offset: off, Timestamp: taskBase.Add(at), Headers: hs}
		if err := task.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for _, o := range outRecords(&out) {
			recs = append(recs, stored(o))
		}
		return recs
	}
	outcomeOf := func(t *testing.T, recs []*kgo.Record) string {
		t.Helper()
		if len(recs) != 1 || recs[0].Topic != "replies" || recs[0].Partition != 1 {
			t.Fatalf("explain emitted %d records (%v); want one reply on partition 1", len(recs), recs)
		}
		var d schemas.Decision
		if err := schemas.Decode(recs[0].Value, &d); err != nil {
			t.Fatal(err)
		}
		return d.Outcome
	}
	t.Run("an explain of a new request says accepted and leaves the request new", func(t *testing.T) {
		task := NewTask(DefaultPolicy(), topics, 3)
		if got := outcomeOf(t, run(t, task, req("a", "k1", ""), 0, 0, explainHeaders)); got != schemas.DecisionAccepted {
			t.Fatalf("explain says %s, want accepted", got)
		}
		task.Commit()
		if task.Len() != 0 {
			t.Fatalf("the seen-set holds %d entries after an explain, want none", task.Len())
		}
		if x := feed(t, task, 1, []sent{{req("a", "k1", ""), 0}}); len(x.outcomes) != 1 || x.outcomes[0] != schemas.DecisionAccepted {
			t.Fatalf("the request after its explain was %v, want accepted", x.outcomes)
		}
	})
	t.Run("an explain after a send in the same open transaction sees the send", func(t *testing.T) {
		task := NewTask(DefaultPolicy(), topics, 3)
		run(t, task, req("a", "k1", "i1"), 0, 0, nil)
		if got := outcomeOf(t, run(t, task, req("a", "k1", "i1"), 1, time.Second, explainHeaders)); got != schemas.DecisionIdempotentReplay {
			t.Fatalf("explain says %s, want idempotent_replay", got)
		}
		if got := outcomeOf(t, run(t, task, req("b", "k1", ""), 2, time.Second, explainHeaders)); got != schemas.DecisionDuplicate {
			t.Fatalf("explain of the same dedupe key says %s, want duplicate", got)
		}
	})
	t.Run("an explain stamped far ahead does not move stream time: no entry expires early", func(t *testing.T) {
		task := NewTask(DefaultPolicy(), topics, 3)
		run(t, task, req("a", "k1", ""), 0, 0, nil)
		task.Commit()
		if recs := run(t, task, req("a", "k2", ""), 1, 48*time.Hour, explainHeaders); len(recs) != 1 {
			t.Fatalf("the explain emitted %d records (tombstones?), want its reply alone", len(recs))
		}
		task.Commit()
		if x := feed(t, task, 2, []sent{{req("a", "k1", ""), time.Minute}}); len(x.outcomes) != 1 || x.outcomes[0] != schemas.DecisionDuplicate {
			t.Fatalf("a repeat inside the window after a far-ahead explain was %v, want duplicate", x.outcomes)
		}
	})
	t.Run("an explain that names no reply partition is dropped", func(t *testing.T) {
		task := NewTask(DefaultPolicy(), topics, 3)
		if recs := run(t, task, req("a", "k1", ""), 0, 0, []kgo.RecordHeader{{Key: reply.ExplainHeader}}); len(recs) != 0 {
			t.Fatalf("%d records for an explain nobody waits for, want none", len(recs))
		}
	})
}

func TestAnExplainForTheRouteStageIsHandedOnOnlyWhenItWouldBeAccepted(t *testing.T) {
	topics := Topics{Requests: "requests", Decisions: "decisions", Seen: "seen", Accepted: "accepted", Replies: "replies", ReplyPartitions: 4}
	hs := append(reply.AppendHeader(nil, 2), reply.ExplainRouteHeader())
	task := NewTask(DefaultPolicy(), topics, 3)
	process := func(r schemas.Request, off int64, hs []kgo.RecordHeader) []*kgo.Record {
		b, err := schemas.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		var out stage.Out
		if err := task.Process(&kgo.Record{Topic: "requests", Partition: 3, Key: []byte(r.NotificationID), Value: b, Offset: off, Timestamp: taskBase, Headers: hs}, &out); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for _, o := range outRecords(&out) {
			recs = append(recs, stored(o))
		}
		task.Commit()
		return recs
	}
	recs := process(req("a", "k1", ""), 0, hs)
	if len(recs) != 2 || recs[0].Topic != "replies" || recs[1].Topic != "accepted" {
		t.Fatalf("an explain that would be accepted emitted %d records, want its reply and an accepted explain", len(recs))
	}
	if p, ok := reply.FromHeaders(recs[1].Headers); !ok || p != 2 || !reply.IsExplain(recs[1]) || !reply.ExplainsRoute(recs[1]) {
		t.Fatalf("the accepted explain's headers %v: want reply partition 2 and the route explain mark", recs[1].Headers)
	}
	if task.Len() != 0 {
		t.Fatalf("the seen-set holds %d entries after an explain, want none", task.Len())
	}
	process(req("a", "k1", ""), 1, nil) // the real send
	if recs := process(req("a", "k1", ""), 2, hs); len(recs) != 1 || recs[0].Topic != "replies" {
		t.Fatalf("an explain of a duplicate emitted %d records, want its reply alone", len(recs))
	}
}
