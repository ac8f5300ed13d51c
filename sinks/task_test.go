package sinks

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// scripted answers each call with the next result scripted for its
// delivery (success once the script is used up) and counts the calls.
type scripted struct {
	mu      sync.Mutex
	results map[string][]Result
	calls   map[string]int
}

func (s *scripted) Send(_ context.Context, cmd *schemas.DeliveryCommand) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[cmd.DeliveryID]++
	if rs := s.results[cmd.DeliveryID]; len(rs) > 0 {
		s.results[cmd.DeliveryID] = rs[1:]
		return rs[0]
	}
	return Result{Class: Success, Rule: "accepted", Status: 200}
}

type harness struct {
	t    *testing.T
	rt   *runtime
	task *task
	prov *scripted
	now  time.Time
	out  []*kgo.Record // everything committed so far
}

func newHarness(t *testing.T, p Policy) *harness {
	h := &harness{t: t, prov: &scripted{results: map[string][]Result{}, calls: map[string]int{}}, now: time.UnixMilli(1_800_000_000_000)}
	p.defaults()
	h.rt = newRuntime(Options{
		Instance:    stage.Instance{Logger: testLogger(t), Metrics: metrics.NewRegistry()},
		Channel:     "apns",
		Provider:    h.prov,
		Catalog:     topics.New(topics.Options{}),
		Policy:      p,
		MaxInFlight: 4,
		CallTimeout: time.Second,
		Now:         func() time.Time { return h.now },
	})
	h.rt.devices = registered{}
	h.task = h.rt.newTask(testPartition)
	return h
}

// testPartition is the input partition the harness's task owns: not 0, so
// that a state record that forgets its partition (the zero value) is
// caught by commit.
const testPartition int32 = 3

// commit adds the records of a committed transaction to h.out, failing the
// test if a record on the state topic (the changelog) is not on the task's
// partition.
func (h *harness) commit(out *stage.Out) {
	h.t.Helper()
	for _, r := range out.Records() {
		if r.Topic == h.rt.topics.State && r.Partition != h.task.p {
			h.t.Fatalf("state record %s on partition %d, want the input's %d", r.Key, r.Partition, h.task.p)
		}
	}
	h.out = append(h.out, out.Records()...)
}

// input is c as the task reads it: a record of the harness's partition.
func (h *harness) input(c *schemas.DeliveryCommand) *kgo.Record {
	h.t.Helper()
	b, err := schemas.Encode(c)
	if err != nil {
		h.t.Fatal(err)
	}
	return &kgo.Record{Topic: h.rt.topics.Deliveries, Partition: h.task.p, Key: []byte(c.DeliveryID), Value: b}
}

// registered is a devices directory where every command's device is
// registered with the command's token (cmd's).
type registered struct{}

func (registered) SyncAll(context.Context) error { return nil }

func (registered) Recipient(tenant, recipient string) route.Recipient {
	var who route.Recipient
	for _, id := range []string{"d", "e"} {
		c := cmd(id)
		who.Devices = append(who.Devices, schemas.Device{Tenant: tenant, Recipient: recipient, DeviceID: c.DeviceID, Token: c.Token, Enabled: true})
	}
	return who
}

func testLogger(t *testing.T) *slogLogger { return newTestLogger(t) }

func cmd(id string) *schemas.DeliveryCommand {
	return &schemas.DeliveryCommand{DeliveryID: id, NotificationID: "n-" + id, Tenant: "acme", Type: "t", Recipient: "u1",
		DeviceID: "dev-" + id, Channel: "apns", Token: "tok-" + id, CollapseID: "n-" + id, APNsID: "uuid-" + id}
}

// step runs one stage step as the runtime does: process the input, tick,
// commit, call, and commit the results.
func (h *harness) step(input ...*schemas.DeliveryCommand) {
	h.t.Helper()
	var out stage.Out
	for _, c := range input {
		if err := h.task.Process(h.input(c), &out); err != nil {
			h.t.Fatal(err)
		}
	}
	h.task.Tick(&out)
	h.task.Commit()
	h.commit(&out)
	for h.rt.afterCommit(context.Background()) {
		var more stage.Out
		h.task.Tick(&more)
		h.task.Commit()
		h.commit(&more)
	}
}

// on returns the committed records of one topic, decoded by their schema
// header, as "key:summary" strings.
func (h *harness) on(topic string) []string { return h.summary(h.out, topic) }

// summary returns the records of one topic among recs as on does.
func (h *harness) summary(recs []*kgo.Record, topic string) []string {
	var got []string
	for _, r := range recs {
		if r.Topic != topic {
			continue
		}
		switch {
		case strings.HasSuffix(topic, "attempts"):
			var a schemas.Attempt
			must(h.t, schemas.Decode(r.Value, &a))
			got = append(got, a.DeliveryID+":"+a.Result+"#"+itoa(a.Attempt)+"/"+a.Classification)
		case strings.HasSuffix(topic, "outcomes"):
			var o schemas.Outcome
			must(h.t, schemas.Decode(r.Value, &o))
			got = append(got, o.DeliveryID+":"+o.Status)
		case strings.Contains(topic, "sinkstate"):
			var e schemas.SinkEntry
			must(h.t, schemas.Decode(r.Value, &e))
			got = append(got, e.DeliveryID+":"+e.Status+"#"+itoa(e.Attempt))
		case strings.HasSuffix(topic, "devices"):
			var d schemas.Device
			must(h.t, schemas.Decode(r.Value, &d))
			got = append(got, string(r.Key)+":enabled="+map[bool]string{true: "true", false: "false"}[d.Enabled]+"/"+d.RetiredReason)
		default:
			got = append(got, string(r.Key))
		}
	}
	return got
}

func TestTheRuntimeWritesIntentsBeforeCallingAndResultsAfter(t *testing.T) {
	day := Policy{MaxAttempts: 3, Backoff: backoff.Policy{Min: time.Second, Max: 4 * time.Second}, MaxAge: 24 * time.Hour}
	cases := []struct {
		name                                            string
		policy                                          Policy
		script                                          []Result
		steps                                           int           // steps after the first, each after advancing the clock
		advance                                         time.Duration // clock advance per step
		attempts, outcomes, state, deadletters, devices []string
		calls                                           int
	}{
		{
			name: "a success is one intent, one call, one attempt and a delivered outcome", policy: day,
			attempts: []string{"d:sent#1/accepted"}, outcomes: []string{"d:delivered"},
			state: []string{"d:pending#1", "d:final#1"}, calls: 1,
		},
		{
			name: "a retryable error parks the delivery and retries it with the same command once due", policy: day,
			script: []Result{{Class: Retryable, Rule: "server_error", Status: 500}}, steps: 1, advance: 5 * time.Second,
			attempts: []string{"d:retryable#1/server_error", "d:sent#2/accepted"}, outcomes: []string{"d:delivered"},
			state: []string{"d:pending#1", "d:parked#1", "d:pending#2", "d:final#2"}, calls: 2,
		},
		{
			name: "a parked delivery is not retried before its Retry-After", policy: day,
			script: []Result{{Class: Retryable, Rule: "too_many_requests", Status: 429, RetryAfter: time.Hour}}, steps: 1, advance: 59 * time.Minute,
			attempts: []string{"d:retryable#1/too_many_requests"}, state: []string{"d:pending#1", "d:parked#1"}, calls: 1,
		},
		{
			name: "a parked delivery is retried as soon as its Retry-After has passed, to the millisecond", policy: day,
			script: []Result{{Class: Retryable, Rule: "too_many_requests", Status: 429, RetryAfter: time.Hour}}, steps: 1, advance: time.Hour,
			attempts: []string{"d:retryable#1/too_many_requests", "d:sent#2/accepted"}, outcomes: []string{"d:delivered"},
			state: []string{"d:pending#1", "d:parked#1", "d:pending#2", "d:final#2"}, calls: 2,
		},
		{
			name: "retries stop at MaxAttempts: outcome failed and a dead letter", policy: day,
			script: []Result{{Class: Ambiguous, Rule: "no_answer"}, {Class: Retryable, Rule: "not_sent"}, {Class: Retryable, Rule: "not_sent"}},
			steps:  3, advance: 5 * time.Second,
			attempts:    []string{"d:ambiguous#1/no_answer", "d:retryable#2/not_sent", "d:retryable#3/not_sent"},
			outcomes:    []string{"d:failed"},
			state:       []string{"d:pending#1", "d:parked#1", "d:pending#2", "d:parked#2", "d:pending#3", "d:final#3"},
			deadletters: []string{"d"}, calls: 3,
		},
		{
			name:     "a retry that would start after the expiry ends the delivery as expired",
			policy:   Policy{MaxAttempts: 5, Backoff: backoff.Policy{Min: time.Second, Max: time.Second}, MaxAge: time.Second},
			script:   []Result{{Class: Retryable, Rule: "too_many_requests", RetryAfter: time.Minute}},
			attempts: []string{"d:retryable#1/too_many_requests"}, outcomes: []string{"d:expired"},
			state: []string{"d:pending#1", "d:final#1"}, calls: 1,
		},
		{
			name: "a result of no known class is audited ambiguous (unclassified) and retried", policy: day,
			script: []Result{{Rule: "forgot_the_class"}, {Class: Ambiguous + 1, Rule: "made_one_up"}}, steps: 2, advance: 5 * time.Second,
			attempts: []string{"d:ambiguous#1/unclassified", "d:ambiguous#2/unclassified", "d:sent#3/accepted"}, outcomes: []string{"d:delivered"},
			state: []string{"d:pending#1", "d:parked#1", "d:pending#2", "d:parked#2", "d:pending#3", "d:final#3"}, calls: 3,
		},
		{
			name: "an invalid token retires the device", policy: day,
			script:   []Result{{Class: Permanent, Rule: "unregistered", Status: 410, Reason: "Unregistered", RetireDevice: true}},
			attempts: []string{"d:permanent#1/unregistered"}, outcomes: []string{"d:device_retired"},
			state: []string{"d:pending#1", "d:final#1"}, devices: []string{"acme/u1/dev-d:enabled=false/Unregistered"}, calls: 1,
		},
		{
			name: "another permanent error fails the delivery and dead-letters it", policy: day,
			script:   []Result{{Class: Permanent, Rule: "payload_too_large", Status: 413, Reason: "PayloadTooLarge"}},
			attempts: []string{"d:permanent#1/payload_too_large"}, outcomes: []string{"d:failed"},
			state: []string{"d:pending#1", "d:final#1"}, deadletters: []string{"d"}, calls: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.policy)
			h.prov.results["d"] = tc.script
			c := cmd("d")
			c.CreatedAt = h.now.UnixMilli()
			h.step(c)
			for range tc.steps {
				h.now = h.now.Add(tc.advance)
				h.step()
			}
			tp := h.rt.topics
			check(t, "attempts", h.on(tp.Attempts), tc.attempts)
			check(t, "outcomes", h.on(tp.Outcomes), tc.outcomes)
			check(t, "state", h.on(tp.State), tc.state)
			check(t, "dead letters", h.on(tp.DeadLetters), tc.deadletters)
			check(t, "devices", h.on(tp.Devices), tc.devices)
			if h.prov.calls["d"] != tc.calls {
				t.Errorf("%d calls, want %d", h.prov.calls["d"], tc.calls)
			}
		})
	}
}

func TestADeliveryAlreadyFinalOrInProgressIsNotSentAgain(t *testing.T) {
	for _, format := range []schemas.Format{schemas.FormatBinary, schemas.FormatJSON} {
		t.Run("audited as a duplicate decision in "+format.DecisionSchema(), func(t *testing.T) {
			h := newHarness(t, Policy{})
			h.rt.format = format
			h.prov.results["parked"] = []Result{{Class: Retryable, Rule: "server_error"}}
			h.step(cmd("done"), cmd("parked"))
			h.step(cmd("done"), cmd("parked"), cmd("done"))
			if h.prov.calls["done"] != 1 || h.prov.calls["parked"] != 1 {
				t.Fatalf("calls %v, want one each", h.prov.calls)
			}
			check(t, "outcomes", h.on(h.rt.topics.Outcomes), []string{"done:delivered"})
			var repeats []string
			for _, r := range h.out {
				if r.Topic == h.rt.topics.Decisions {
					var d schemas.Decision
					must(t, schemas.Decode(r.Value, &d))
					if d.Schema != format.DecisionSchema() || string(r.Headers[0].Value) != d.Schema {
						t.Fatalf("a decision read as %s, header %s, want %s", d.Schema, r.Headers[0].Value, format.DecisionSchema())
					}
					repeats = append(repeats, d.Stage+":"+d.Outcome+":"+d.NotificationID)
				}
			}
			check(t, "decisions", repeats, []string{"sink:duplicate:n-done", "sink:duplicate:n-parked", "sink:duplicate:n-done"})
		})
	}
}

func TestAnIntentRestoredWithoutAResultIsAuditedAmbiguousAndRetriedWithTheSameIDs(t *testing.T) {
	h := newHarness(t, Policy{Backoff: backoff.Policy{Min: time.Millisecond, Max: time.Millisecond}})
	c := cmd("d")
	c.CreatedAt = h.now.UnixMilli()
	b, _ := schemas.Encode(&schemas.SinkEntry{DeliveryID: "d", Status: schemas.SinkPending, Attempt: 2, ExpiresAt: h.now.Add(time.Hour).UnixMilli(), Command: c})
	final, _ := schemas.Encode(&schemas.SinkEntry{DeliveryID: "f", Status: schemas.SinkFinal, Attempt: 1, Outcome: schemas.OutcomeDelivered})
	for _, r := range []*kgo.Record{{Key: []byte("d"), Value: b}, {Key: []byte("f"), Value: final}} {
		must(t, h.task.Restore(r))
	}
	h.step(cmd("f")) // a redelivered command of a final delivery
	h.now = h.now.Add(time.Second)
	h.step()
	check(t, "attempts", h.on(h.rt.topics.Attempts), []string{"d:ambiguous#2/interrupted", "d:sent#3/accepted"})
	check(t, "outcomes", h.on(h.rt.topics.Outcomes), []string{"d:delivered"})
	if h.prov.calls["f"] != 0 {
		t.Fatalf("the final delivery was sent again")
	}
}

func TestAnAbortedResultIsWrittenAgainAndItsIntentsAreNotCalled(t *testing.T) {
	h := newHarness(t, Policy{})
	var out stage.Out
	must(t, h.task.Process(h.input(cmd("d")), &out))
	h.task.Tick(&out)
	h.task.Abort() // the intent's transaction aborted: the input is processed again
	if h.rt.afterCommit(context.Background()) {
		t.Fatal("an aborted intent was called")
	}
	h.step(cmd("d"))
	check(t, "attempts", h.on(h.rt.topics.Attempts), []string{"d:sent#1/accepted"})
}

// TestAResultsTransactionAbortedByARetryableProduceErrorIsWrittenAgain: the
// runtime aborts a transaction whose produce failed with a retryable error
// (a leader election, NOT_ENOUGH_REPLICAS) and retries from the committed
// state. A transaction without input holds results the task keeps outside
// its state (a call's result, an interrupted intent's): if Abort forgot
// that they were never committed, they would not be written again and the
// delivery would stay pending until a restart resent it as interrupted.
func TestAResultsTransactionAbortedByARetryableProduceErrorIsWrittenAgain(t *testing.T) {
	cases := []struct {
		name string
		// before commits what comes before the transaction that aborts.
		before                    func(t *testing.T, h *harness)
		attempts, outcomes, state []string
	}{
		{
			name: "a results transaction aborted by a retryable produce error writes the same attempt, outcome and final state in the next transaction",
			before: func(t *testing.T, h *harness) {
				var out stage.Out
				must(t, h.task.Process(h.input(cmd("d")), &out))
				h.task.Tick(&out)
				h.task.Commit()
				h.commit(&out)
				if !h.rt.afterCommit(context.Background()) {
					t.Fatal("the committed intent was not called")
				}
			},
			attempts: []string{"d:sent#1/accepted"}, outcomes: []string{"d:delivered"}, state: []string{"d:final#1"},
		},
		{
			name: "a transaction resolving an interrupted intent, aborted the same way, writes the same ambiguous attempt and parked state in the next transaction",
			before: func(t *testing.T, h *harness) {
				c := cmd("d")
				c.CreatedAt = h.now.UnixMilli()
				b, err := schemas.Encode(&schemas.SinkEntry{DeliveryID: "d", Status: schemas.SinkPending, Attempt: 2, ExpiresAt: h.now.Add(time.Hour).UnixMilli(), Command: c})
				must(t, err)
				must(t, h.task.Restore(&kgo.Record{Topic: h.rt.topics.State, Partition: h.task.p, Key: []byte("d"), Value: b}))
			},
			attempts: []string{"d:ambiguous#2/interrupted"}, state: []string{"d:parked#2"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Policy{})
			tc.before(t, h)
			var aborted stage.Out
			h.task.Tick(&aborted)
			h.task.Abort()
			h.now = h.now.Add(time.Second) // the runtime's backoff before the retry
			var next stage.Out
			h.task.Tick(&next)
			h.task.Commit()
			h.commit(&next)
			tp := h.rt.topics
			for _, w := range []struct {
				topic string
				want  []string
			}{{tp.Attempts, tc.attempts}, {tp.Outcomes, tc.outcomes}, {tp.State, tc.state}} {
				check(t, "aborted transaction's "+w.topic, h.summary(aborted.Records(), w.topic), w.want)
				check(t, "next transaction's "+w.topic, h.summary(next.Records(), w.topic), w.want)
			}
			var after stage.Out
			h.task.Tick(&after)
			if got := h.summary(after.Records(), tp.Attempts); len(got) != 0 {
				t.Fatalf("a committed result was written again: %v", got)
			}
		})
	}
}

func TestDecideBoundsRetriesByAttemptsAndExpiry(t *testing.T) {
	p := Policy{MaxAttempts: 3, Backoff: backoff.Policy{Min: time.Second, Max: 10 * time.Second}}
	now := time.UnixMilli(1_000_000)
	far := now.Add(time.Hour).UnixMilli()
	cases := []struct {
		name    string
		res     Result
		attempt int
		expires int64
		status  string
		lo, hi  time.Duration // the retry's delay bounds when status is ""
	}{
		{"success is delivered", Result{Class: Success}, 1, far, schemas.OutcomeDelivered, 0, 0},
		{"a token error retires the device", Result{Class: Permanent, RetireDevice: true}, 1, far, schemas.OutcomeDeviceRetired, 0, 0},
		{"another permanent error fails", Result{Class: Permanent}, 1, far, schemas.OutcomeFailed, 0, 0},
		{"the first retry waits up to twice the minimum", Result{Class: Retryable}, 1, far, "", 0, 2 * time.Second},
		{"an ambiguous call is retried", Result{Class: Ambiguous}, 2, far, "", 0, 4 * time.Second},
		{"Retry-After is a floor", Result{Class: Retryable, RetryAfter: 30 * time.Second}, 1, far, "", 30 * time.Second, 30 * time.Second},
		{"the last attempt fails", Result{Class: Retryable}, 3, far, schemas.OutcomeFailed, 0, 0},
		{"a retry past the expiry expires", Result{Class: Retryable, RetryAfter: time.Minute}, 1, now.Add(time.Second).UnixMilli(), schemas.OutcomeExpired, 0, 0},
		// Retry-After above the backoff's Max makes the retry's time exact.
		{"a retry due exactly at the expiry expires", Result{Class: Retryable, RetryAfter: 30 * time.Second}, 1, now.Add(30 * time.Second).UnixMilli(), schemas.OutcomeExpired, 0, 0},
		{"a retry due a millisecond before the expiry is made", Result{Class: Ambiguous, RetryAfter: 30 * time.Second}, 1, now.Add(30*time.Second + time.Millisecond).UnixMilli(), "", 30 * time.Second, 30 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for range 100 {
				v := decide(p, tc.res, tc.attempt, tc.expires, now)
				if v.status != tc.status {
					t.Fatalf("status %q, want %q", v.status, tc.status)
				}
				if tc.status == "" {
					if d := time.Duration(v.notBefore-now.UnixMilli()) * time.Millisecond; d < tc.lo || d > tc.hi {
						t.Fatalf("retry after %v, want within [%v, %v]", d, tc.lo, tc.hi)
					}
				}
			}
		})
	}
}

func check(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s:\n got %v\nwant %v", what, got, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { return strconvItoa(n) }

func TestTheSentSetForgetsADeliveryOnlyAfterItsExpiryAndThenARepeatIsExpiredNotSent(t *testing.T) {
	h := newHarness(t, Policy{KeepFinal: time.Hour})
	c := cmd("d")
	c.ExpiresAt = h.now.Add(time.Hour).UnixMilli()
	h.step(c)
	for _, step := range []struct {
		advance time.Duration
		pruned  bool
	}{{time.Hour, false}, {59 * time.Minute, false}, {2 * time.Minute, true}} {
		h.now = h.now.Add(step.advance)
		before := len(h.out)
		h.step()
		tombstones := 0
		for _, r := range h.out[before:] {
			if r.Topic == h.rt.topics.State && r.Value == nil {
				tombstones++
			}
		}
		if (tombstones == 1) != step.pruned || tombstones > 1 {
			t.Fatalf("after %v more: %d tombstones, want pruned %v", step.advance, tombstones, step.pruned)
		}
	}
	h.step(c)
	if h.prov.calls["d"] != 1 {
		t.Fatalf("a repeat after pruning was sent again (%d calls)", h.prov.calls["d"])
	}
	check(t, "outcomes", h.on(h.rt.topics.Outcomes), []string{"d:delivered", "d:expired"})
}

// TestAnOutcomeNamesItsCommandsOccurrence: the outcome carries the
// command's notification and occurrence ids, by which the webhook
// completion stage gathers a notification's final states.
func TestAnOutcomeNamesItsCommandsOccurrence(t *testing.T) {
	h := newHarness(t, Policy{})
	c := cmd("d")
	c.OccurrenceID = "0b6f8a2d9c4e1f3a5b7d9e0c2a4f6b8d"
	h.step(c)
	var got []schemas.Outcome
	for _, r := range h.out {
		if r.Topic == h.rt.topics.Outcomes {
			var o schemas.Outcome
			must(t, schemas.Decode(r.Value, &o))
			got = append(got, o)
		}
	}
	if len(got) != 1 || got[0].NotificationID != c.NotificationID || got[0].OccurrenceID != c.OccurrenceID {
		t.Fatalf("outcomes %+v, want one naming notification %s, occurrence %s", got, c.NotificationID, c.OccurrenceID)
	}
}
