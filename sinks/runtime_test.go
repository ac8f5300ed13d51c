package sinks

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

// series returns the exported values of one metric family, by the values
// of its labels joined with ",": only the series it exports.
func series(t *testing.T, reg *metrics.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gatherer().Gather()
	must(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[strings.Join(labels, ",")] = v
		}
	}
	return out
}

// TestTheRuntimeExportsItsCallsResultsOutcomesDuplicatesAndParkedDeliveries:
// the counters count what committed, the in-flight gauge is back to 0
// once the calls returned, and each partition exports how many deliveries
// are parked and the age of the oldest (by its command's creation; a
// command without one is not counted in the age).
func TestTheRuntimeExportsItsCallsResultsOutcomesDuplicatesAndParkedDeliveries(t *testing.T) {
	h := newHarness(t, Policy{})
	for _, id := range []string{"p", "q"} {
		h.prov.results[id] = []Result{{Class: Retryable, Rule: "too_many_requests", RetryAfter: time.Hour}}
	}
	p, q := cmd("p"), cmd("q")
	p.CreatedAt = h.now.Add(-30 * time.Second).UnixMilli()
	h.step(cmd("d"), p, q)
	h.now = h.now.Add(time.Minute)
	h.step(cmd("d"))
	reg := h.rt.metrics
	for _, c := range []struct {
		name string
		want map[string]float64
	}{
		{"herald_sink_calls_total", map[string]float64{"apns": 3}},
		{"herald_sink_results_total", map[string]float64{"apns,sent": 1, "apns,retryable": 2, "apns,permanent": 0, "apns,ambiguous": 0}},
		{"herald_sink_attempts_total", map[string]float64{"apns,sent,accepted": 1, "apns,retryable,too_many_requests": 2}},
		{"herald_sink_outcomes_total", map[string]float64{"apns": 1}},
		{"herald_sink_duplicates_total", map[string]float64{"apns": 1}},
		{"herald_sink_in_flight", map[string]float64{"apns": 0}},
		{parkedName, map[string]float64{"apns,3": 2}},
		{parkedAgeName, map[string]float64{"apns,3": 90}},
	} {
		if got := series(t, reg, c.name); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s %v, want %v", c.name, got, c.want)
		}
	}
}

// concurrent is a provider that holds every call until four are in flight
// at once (or the call's context ends), and notes the most in flight.
type concurrent struct {
	Provider
	now, most atomic.Int64
	four      sync.Once
	release   chan struct{}
}

func (c *concurrent) Send(ctx context.Context, cmd *schemas.DeliveryCommand) Result {
	n := c.now.Add(1)
	defer c.now.Add(-1)
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
	if n == 4 {
		c.four.Do(func() { close(c.release) })
	}
	select {
	case <-c.release:
	case <-ctx.Done():
	}
	return c.Provider.Send(ctx, cmd)
}

// TestMoreCallsThanMaxInFlightAreEachMadeOnceAtMostMaxInFlightAtATime:
// nine intents and four workers (MaxInFlight): every delivery is called
// once and delivered, and no more than four calls are ever in flight.
func TestMoreCallsThanMaxInFlightAreEachMadeOnceAtMostMaxInFlightAtATime(t *testing.T) {
	h := newHarness(t, Policy{})
	prov := &concurrent{Provider: h.prov, release: make(chan struct{})}
	h.rt.provider, h.rt.callTimeout = prov, time.Minute
	var cmds []*schemas.DeliveryCommand
	var want []string
	for i := range 9 {
		c := cmd(fmt.Sprint("d", i))
		cmds = append(cmds, c)
		want = append(want, c.DeliveryID+":delivered")
	}
	h.step(cmds...)
	check(t, "outcomes", h.on(h.rt.topics.Outcomes), want)
	for _, c := range cmds {
		if n := h.prov.calls[c.DeliveryID]; n != 1 {
			t.Errorf("%s called %d times, want once", c.DeliveryID, n)
		}
	}
	if m := prov.most.Load(); m != 4 {
		t.Fatalf("%d calls in flight at most, want MaxInFlight (4)", m)
	}
}

// TestARevokedTaskLeavesTheRuntimeButALateRevokeSparesItsSuccessor: once
// revoked, a partition's task is no longer the runtime's and its parked
// gauges are gone; the revoke of a task the partition's new task already
// replaced leaves the new one in place, and its calls are made.
func TestARevokedTaskLeavesTheRuntimeButALateRevokeSparesItsSuccessor(t *testing.T) {
	h := newHarness(t, Policy{})
	h.prov.results["p"] = []Result{{Class: Retryable, Rule: "server_error", RetryAfter: time.Hour}}
	h.step(cmd("p"))
	h.step()
	if got := series(t, h.rt.metrics, parkedName); got["apns,3"] != 1 {
		t.Fatalf("parked deliveries %v before the revoke", got)
	}
	old := h.task
	old.Revoked()
	if _, ok := h.rt.tasks[testPartition]; ok {
		t.Fatal("the runtime still holds the revoked partition's task")
	}
	if got := series(t, h.rt.metrics, parkedName); len(got) != 0 {
		t.Fatalf("parked deliveries %v exported for a revoked partition", got)
	}

	h.task = h.rt.newTask(testPartition) // assigned again
	old.Revoked()                        // a late revoke of the task it replaced
	h.step(cmd("e"))
	check(t, "outcomes", h.on(h.rt.topics.Outcomes), []string{"e:delivered"})
}

// TestARestoredTombstoneForgetsADeliveryAndAnUnreadableEntryFailsTheRestore:
// the state topic is replayed as written: a tombstone (a pruned entry)
// after an entry forgets it, so a repeat of its command is handled anew;
// an entry that does not decode stops the restore with an error naming it.
func TestARestoredTombstoneForgetsADeliveryAndAnUnreadableEntryFailsTheRestore(t *testing.T) {
	h := newHarness(t, Policy{})
	final, err := schemas.Encode(&schemas.SinkEntry{DeliveryID: "d", Status: schemas.SinkFinal, Attempt: 1, Outcome: schemas.OutcomeDelivered})
	must(t, err)
	must(t, h.task.Restore(&kgo.Record{Key: []byte("d"), Value: final}))
	must(t, h.task.Restore(&kgo.Record{Key: []byte("d")}))
	if err := h.task.Restore(&kgo.Record{Key: []byte("x"), Value: []byte("{not json")}); err == nil || !strings.Contains(err.Error(), "restore x") {
		t.Fatalf("an unreadable entry restored with %v", err)
	}
	h.step(cmd("d"))
	if h.prov.calls["d"] != 1 {
		t.Fatalf("%d calls of a delivery its tombstone forgot, want 1", h.prov.calls["d"])
	}
}

// TestAnUnreadableCommandIsDeadLetteredWithItsCauseAndPositionAndNotSent:
// a record that does not decode, or a command without a delivery id, goes
// to herald.deadletters as it came, with the reason and its position; no
// call, no state, no outcome.
func TestAnUnreadableCommandIsDeadLetteredWithItsCauseAndPositionAndNotSent(t *testing.T) {
	h := newHarness(t, Policy{})
	noID, err := schemas.Encode(&schemas.DeliveryCommand{NotificationID: "n", Tenant: "acme"})
	must(t, err)
	var out stage.Out
	for i, v := range [][]byte{[]byte("{not json"), noID} {
		must(t, h.task.Process(&kgo.Record{Topic: "in", Partition: testPartition, Offset: int64(i), Key: []byte("k"), Value: v}, &out))
	}
	h.task.Tick(&out)
	h.task.Commit()
	if h.rt.afterCommit(context.Background()) {
		t.Fatal("an unreadable command was called")
	}
	var got []string
	for _, r := range out.Records() {
		if r.Topic != h.rt.topics.DeadLetters {
			t.Errorf("a record on %s", r.Topic)
			continue
		}
		hs := map[string]string{}
		for _, hd := range r.Headers {
			hs[hd.Key] = string(hd.Value)
		}
		if !strings.HasPrefix(hs["herald-reason"], "unreadable delivery command") {
			t.Errorf("dead letter reason %q", hs["herald-reason"])
		}
		got = append(got, string(r.Key)+"@"+hs["herald-source"])
	}
	check(t, "dead letters", got, []string{"k@in/3@0", "k@in/3@1"})
}

// logged collects the log records of one logger.
type logged struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logged) Enabled(context.Context, slog.Level) bool { return true }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
	return nil
}
func (l *logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logged) WithGroup(string) slog.Handler      { return l }

// TestAFailedCallIsLoggedWithItsErrorAndASuccessIsNot: a call that failed
// with a transport error leaves a debug line with the error; a successful
// call logs nothing.
func TestAFailedCallIsLoggedWithItsErrorAndASuccessIsNot(t *testing.T) {
	h := newHarness(t, Policy{})
	logs := &logged{}
	h.rt.log = slog.New(logs)
	h.prov.results["f"] = []Result{{Class: Retryable, Rule: "not_sent", Err: fmt.Errorf("connection refused")}}
	h.step(cmd("ok"), cmd("f"))
	var got []string
	for _, r := range logs.records {
		line := r.Level.String() + " " + r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "delivery" || a.Key == "err" {
				line += " " + a.Key + "=" + a.Value.String()
			}
			return true
		})
		got = append(got, line)
	}
	check(t, "log", got, []string{"DEBUG provider call failed delivery=f err=connection refused"})
}
