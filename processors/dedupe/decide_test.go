package dedupe

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

var testTopics = Topics{Requests: "requests", Decisions: "decisions", Seen: "seen", Accepted: "accepted"}

// req builds a request the way the API does: the id from the dedupe key,
// else from the idempotency key, else random.
func req(title, dedupeKey, idemKey string) schemas.Request {
	r := schemas.Request{Tenant: "acme", Type: "invoice.paid", Recipient: "u_8831", Title: title, Body: "b",
		DedupeKey: dedupeKey, IdempotencyKey: idemKey, Source: "api", RequestID: identity.NewRandomID()}
	switch {
	case dedupeKey != "":
		r.IDSource, r.NotificationID = "dedupe_key", identity.DedupeID(r.Tenant, r.Type, r.Recipient, dedupeKey)
	case idemKey != "":
		r.IDSource, r.NotificationID = "idempotency_key", identity.IdempotencyID(r.Tenant, r.Type, r.Recipient, idemKey)
	default:
		r.IDSource, r.NotificationID = "random", identity.NewRandomID()
	}
	return r
}

type sent struct {
	r  schemas.Request
	at time.Duration // since the first request
}

// runTask feeds requests through one Task, committing after each, and
// returns the decision outcomes and the accepted notification ids. The
// task owns partition runPartition, and a seen record (the changelog) on
// any other partition fails the test.
func runTask(t *testing.T, p Policy, reqs []sent) (outcomes []string, accepted []string, task *Task) {
	t.Helper()
	return runTaskLayout(t, p, reqs, false)
}

// runTaskLayout is runTask with the task writing the per-key layout
// (Task.SeenPerKey) or the batched one.
func runTaskLayout(t *testing.T, p Policy, reqs []sent, perKey bool) (outcomes []string, accepted []string, task *Task) {
	t.Helper()
	task = NewTask(p, testTopics, runPartition)
	task.SeenPerKey = perKey
	base := time.UnixMilli(1_764_500_000_000)
	for i, s := range reqs {
		b, err := schemas.Encode(s.r)
		if err != nil {
			t.Fatal(err)
		}
		var out stage.Out
		rec := &kgo.Record{Topic: "requests", Partition: runPartition, Key: []byte(s.r.NotificationID), Value: b, Offset: int64(i), Timestamp: base.Add(s.at)}
		if err := task.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
		task.Tick(&out)
		task.Commit()
		for _, o := range outRecords(&out) {
			switch o.Topic {
			case "seen":
				if o.Partition != runPartition {
					t.Fatalf("seen record %s on partition %d, want the input's %d", o.Key, o.Partition, runPartition)
				}
			case "decisions":
				var d schemas.Decision
				if err := schemas.Decode(o.Value, &d); err != nil {
					t.Fatal(err)
				}
				outcomes = append(outcomes, d.Outcome)
			case "accepted":
				var a schemas.Accepted
				if err := schemas.Decode(o.Value, &a); err != nil {
					t.Fatal(err)
				}
				accepted = append(accepted, a.NotificationID)
			}
		}
	}
	return outcomes, accepted, task
}

// runPartition is the input partition of runTask's task: not 0, so that a
// seen record that forgets its partition (the zero value) is caught.
const runPartition int32 = 3

type scenario struct {
	name string
	reqs []sent
	want []string
}

var seedPolicy = Policy{DefaultWindowMs: 60_000, IdempotencyTTLMs: 24 * 3600_000}

// seedScenarios are the seed documents' scenarios, run here on a Task and in
// kafka_test.go through the stage on the real broker.
func seedScenarios() []scenario {
	webhook := req("paid", "", "evt_1")
	twoPaths := req("paid", "inv_2201", "")
	changed := webhook
	changed.Title = "paid twice?"
	both := req("paid", "inv_9", "evt_9")
	bothOtherCall := req("paid", "inv_9", "evt_10")
	return []scenario{
		{"a webhook fired twice with one idempotency key is accepted once and replayed once",
			[]sent{{webhook, 0}, {webhook, time.Second}}, []string{"accepted", "idempotent_replay"}},
		{"two code paths with one dedupe key send once",
			[]sent{{twoPaths, 0}, {req("paid from the other path", "inv_2201", ""), time.Second}}, []string{"accepted", "duplicate"}},
		{"the same dedupe key inside the window is a duplicate, at its end it is new again",
			[]sent{{twoPaths, 0}, {twoPaths, 59_999 * time.Millisecond}, {twoPaths, time.Minute}}, []string{"accepted", "duplicate", "accepted"}},
		{"the same idempotency key with a changed body is a conflict",
			[]sent{{webhook, 0}, {changed, time.Second}}, []string{"accepted", "idempotency_conflict"}},
		{"with both keys idempotency is checked first, then dedupe",
			[]sent{{both, 0}, {both, time.Second}, {bothOtherCall, 2 * time.Second}, {bothOtherCall, 3 * time.Second}},
			[]string{"accepted", "idempotent_replay", "duplicate", "idempotent_replay"}},
		{"a dedupe key with a timestamp in it never dedupes",
			[]sent{{req("x", "inv_1@1764500000", ""), 0}, {req("x", "inv_1@1764500001", ""), time.Second}}, []string{"accepted", "accepted"}},
		{"calls with neither key are always new",
			[]sent{{req("x", "", ""), 0}, {req("x", "", ""), 0}}, []string{"accepted", "accepted"}},
		{"an idempotency key expires after its TTL",
			[]sent{{webhook, 0}, {webhook, 24 * time.Hour}}, []string{"accepted", "accepted"}},
	}
}

func TestSeedScenarios(t *testing.T) {
	for _, c := range seedScenarios() {
		t.Run(c.name, func(t *testing.T) {
			got, _, _ := runTask(t, seedPolicy, c.reqs)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("outcomes = %v, want %v", got, c.want)
			}
		})
	}
}

func TestAReplayReturnsTheOriginalDecision(t *testing.T) {
	p := DefaultPolicy()
	first := req("paid", "inv_1", "evt_1")
	retry := req("paid", "inv_1", "evt_2")
	task := NewTask(p, testTopics, 0)
	var decisions []schemas.Decision
	for i, r := range []schemas.Request{first, retry, retry} {
		b, _ := schemas.Encode(r)
		var out stage.Out
		if err := task.Process(&kgo.Record{Topic: "requests", Value: b, Offset: int64(i), Timestamp: time.UnixMilli(int64(1000 + i))}, &out); err != nil {
			t.Fatal(err)
		}
		task.Commit()
		var d schemas.Decision
		schemas.Decode(outRecords(&out)[0].Value, &d)
		decisions = append(decisions, d)
	}
	if d := decisions[2]; d.Outcome != schemas.DecisionIdempotentReplay || d.OriginalOutcome != schemas.DecisionDuplicate || d.OriginalRequestID != retry.RequestID {
		t.Fatalf("replay of a duplicate answered %+v, want the duplicate decision of the retry", d)
	}
	if d := decisions[1]; d.OriginalRequestID != first.RequestID || d.OriginalAt != 1000 {
		t.Fatalf("duplicate does not name its original: %+v", d)
	}
}

func TestRejectsRequestsItCannotDecide(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*schemas.Request)
	}{
		{"a request without a tenant is rejected", func(r *schemas.Request) { r.Tenant = "" }},
		{"a request whose id is not its dedupe key's is rejected", func(r *schemas.Request) { r.NotificationID = identity.NewRandomID() }},
		{"a request with a negative window is rejected", func(r *schemas.Request) { r.DedupeWindowMs = -1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := req("x", "k", "")
			c.mutate(&r)
			got, accepted, _ := runTask(t, DefaultPolicy(), []sent{{r, 0}})
			if len(got) != 1 || got[0] != schemas.DecisionRejected || len(accepted) != 0 {
				t.Fatalf("outcomes %v accepted %v", got, accepted)
			}
		})
	}
	t.Run("a record that is not a request is rejected, not fatal", func(t *testing.T) {
		task := NewTask(DefaultPolicy(), testTopics, 0)
		var out stage.Out
		if err := task.Process(&kgo.Record{Topic: "requests", Key: []byte("k"), Value: []byte("not json")}, &out); err != nil {
			t.Fatal(err)
		}
		var d schemas.Decision
		if err := schemas.Decode(outRecords(&out)[0].Value, &d); err != nil || d.Outcome != schemas.DecisionRejected {
			t.Fatalf("decision %+v, %v", d, err)
		}
	})
}

func TestAnAbortedTransactionLeavesTheSeenSetAsCommitted(t *testing.T) {
	task := NewTask(DefaultPolicy(), testTopics, 0)
	r := req("x", "k", "")
	b, _ := schemas.Encode(r)
	var out stage.Out
	task.Process(&kgo.Record{Topic: "requests", Value: b, Timestamp: time.UnixMilli(1)}, &out)
	task.Abort()
	if task.Len() != 0 {
		t.Fatal("abort kept a seen entry")
	}
	out = stage.Out{}
	task.Process(&kgo.Record{Topic: "requests", Value: b, Timestamp: time.UnixMilli(1)}, &out)
	var d schemas.Decision
	schemas.Decode(outRecords(&out)[0].Value, &d)
	if d.Outcome != schemas.DecisionAccepted {
		t.Fatalf("after abort the same request was %s, want accepted", d.Outcome)
	}
}

func TestExpiredEntriesAreTombstonedOnStreamTime(t *testing.T) {
	p := Policy{DefaultWindowMs: 1000, IdempotencyTTLMs: 1000}
	for _, perKey := range []bool{true, false} {
		// In the per-key layout each expired key gets its tombstone; in the
		// batched one the keys leave memory alike, and their bucket record is
		// tombstoned once the bucket ends (TestABucketsTombstones...).
		want := map[bool]int{true: 2, false: 0}[perKey]
		t.Run(fmt.Sprintf("per-key layout %v: %d tombstones", perKey, want), func(t *testing.T) {
			_, _, task := runTaskLayout(t, p, []sent{{req("a", "k1", "i1"), 0}, {req("b", "k2", ""), 500 * time.Millisecond}}, perKey)
			if task.Len() != 3 {
				t.Fatalf("live entries = %d, want 3", task.Len())
			}
			r := req("c", "k3", "")
			b, _ := schemas.Encode(r)
			var out stage.Out
			task.Process(&kgo.Record{Topic: "requests", Partition: runPartition, Value: b, Offset: 9, Timestamp: time.UnixMilli(1_764_500_000_000 + 1000)}, &out)
			task.Tick(&out)
			task.Commit()
			var tombstones int
			for _, o := range outRecords(&out) {
				if o.Topic == "seen" && o.Value == nil {
					tombstones++
					if o.Partition != runPartition {
						t.Errorf("tombstone for partition %d, want the input's %d", o.Partition, runPartition)
					}
				}
			}
			if tombstones != want || task.Len() != 2 {
				t.Fatalf("tombstones = %d, live = %d; want %d tombstones (k1, i1) and 2 live (k2, k3)", tombstones, task.Len(), want)
			}
		})
	}
}

// TestAKeyAcceptedAgainIsANewOccurrence: a notification id names what a
// notification is, so a dedupe key accepted again after its window gets
// the same one; its occurrence id, from which delivery ids derive, is new,
// so the sinks send it. The same request processed again (a replay, a
// retried transaction) derives the same occurrence.
func TestAKeyAcceptedAgainIsANewOccurrence(t *testing.T) {
	r := req("paid", "inv_2201", "")
	base := time.UnixMilli(1_764_500_000_000)
	accept := func(task *Task, offset int64, at time.Duration) *schemas.Accepted {
		t.Helper()
		b, err := schemas.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		var out stage.Out
		if err := task.Process(&kgo.Record{Topic: "requests", Value: b, Offset: offset, Timestamp: base.Add(at)}, &out); err != nil {
			t.Fatal(err)
		}
		task.Commit()
		for _, o := range outRecords(&out) {
			if o.Topic == "accepted" {
				var a schemas.Accepted
				if err := schemas.Decode(o.Value, &a); err != nil {
					t.Fatal(err)
				}
				return &a
			}
		}
		return nil
	}
	task := NewTask(seedPolicy, testTopics, 0)
	first, again := accept(task, 0, 0), accept(task, 1, time.Minute)
	if first == nil || again == nil {
		t.Fatal("the key was not accepted at the start and again at the end of its window")
	}
	t.Run("both acceptances carry the notification id", func(t *testing.T) {
		if first.NotificationID != r.NotificationID || again.NotificationID != r.NotificationID {
			t.Fatalf("notification ids %s and %s, want %s", first.NotificationID, again.NotificationID, r.NotificationID)
		}
	})
	t.Run("each acceptance is its own occurrence, named by its acceptance time", func(t *testing.T) {
		if first.OccurrenceID == again.OccurrenceID {
			t.Fatalf("both acceptances are occurrence %s", first.OccurrenceID)
		}
		if want := identity.OccurrenceID(r.NotificationID, base.UnixMilli()); first.OccurrenceID != want {
			t.Fatalf("occurrence %s, want identity.OccurrenceID(id, acceptedAt) = %s", first.OccurrenceID, want)
		}
	})
	t.Run("the same request processed again by a fresh task is the same occurrence", func(t *testing.T) {
		if replayed := accept(NewTask(seedPolicy, testTopics, 0), 0, 0); replayed == nil || replayed.OccurrenceID != first.OccurrenceID {
			t.Fatalf("replayed acceptance %+v, want occurrence %s", replayed, first.OccurrenceID)
		}
	})
}

func TestOrDefaultFillsOnlyAPolicyThatSetsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Policy
		want Policy
	}{
		{"the zero policy becomes the default one", Policy{}, DefaultPolicy()},
		{"a policy with only a window keeps its zero TTL", Policy{DefaultWindowMs: 5}, Policy{DefaultWindowMs: 5}},
		{"a policy with only a TTL keeps its zero window", Policy{IdempotencyTTLMs: 7}, Policy{IdempotencyTTLMs: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.OrDefault(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("OrDefault() = %+v, want %+v", got, tc.want)
			}
		})
	}
}
