package sinks

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
)

// TestACommandIsSentParkedOrExpiredByItsTimesToTheMillisecond: a command
// is expired, not sent, from the millisecond of its expiry on; sent at
// once from the millisecond of its NotBefore on (parked until then, in the
// state topic); and a parked command whose time comes with its expiry is
// expired, never sent.
func TestACommandIsSentParkedOrExpiredByItsTimesToTheMillisecond(t *testing.T) {
	cases := []struct {
		name               string
		notBefore, expires time.Duration // after the command's arrival (notBefore -1: none)
		advance            []time.Duration
		calls              []int // after the first step, then after each advance
		outcomes, state    []string
	}{
		{name: "a command that expires the millisecond it arrives is expired, not sent", notBefore: -1, expires: 0,
			calls: []int{0}, outcomes: []string{"d:expired"}, state: []string{"d:final#0"}},
		{name: "a command due the millisecond it arrives is sent at once", notBefore: 0, expires: time.Hour,
			calls: []int{1}, outcomes: []string{"d:delivered"}, state: []string{"d:pending#1", "d:final#1"}},
		{name: "a command due later is parked and sent the millisecond it is due", notBefore: time.Hour, expires: 2 * time.Hour,
			advance: []time.Duration{time.Hour - time.Millisecond, time.Millisecond}, calls: []int{0, 0, 1},
			outcomes: []string{"d:delivered"}, state: []string{"d:parked#0", "d:pending#1", "d:final#1"}},
		{name: "a command due when it expires is expired then, never sent", notBefore: time.Hour, expires: time.Hour,
			advance: []time.Duration{time.Hour}, calls: []int{0, 0},
			outcomes: []string{"d:expired"}, state: []string{"d:parked#0", "d:final#0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Policy{})
			c := cmd("d")
			c.CreatedAt, c.ExpiresAt = h.now.UnixMilli(), h.now.Add(tc.expires).UnixMilli()
			if tc.notBefore >= 0 {
				c.NotBefore = h.now.Add(tc.notBefore).UnixMilli()
			}
			h.step(c)
			calls := []int{h.prov.calls["d"]}
			for _, d := range tc.advance {
				h.now = h.now.Add(d)
				h.step()
				calls = append(calls, h.prov.calls["d"])
			}
			check(t, "calls", itoas(calls), itoas(tc.calls))
			check(t, "outcomes", h.on(h.rt.topics.Outcomes), tc.outcomes)
			check(t, "state", h.on(h.rt.topics.State), tc.state)
		})
	}
}

// TestTheSentSetKeepsADeliveryKeepFinalPastItsExpiryAndIsPrunedAtMostOnceAMinute:
// a final delivery is kept up to and including the millisecond its expiry
// plus Policy.KeepFinal is reached, pruned (one tombstone) by the first
// prune after that, and prunes run at most once a minute; an entry without
// an expiry (written before entries had one) is never pruned, so a repeat
// of its command is still a duplicate.
func TestTheSentSetKeepsADeliveryKeepFinalPastItsExpiryAndIsPrunedAtMostOnceAMinute(t *testing.T) {
	tombstones := func(h *harness, from int) int {
		n := 0
		for _, r := range h.out[from:] {
			if r.Topic == h.rt.topics.State && r.Value == nil {
				n++
			}
		}
		return n
	}
	t.Run("kept KeepFinal past the expiry, then pruned at the next prune, a minute after the last", func(t *testing.T) {
		h := newHarness(t, Policy{KeepFinal: time.Hour})
		c := cmd("d")
		c.ExpiresAt = h.now.Add(time.Hour).UnixMilli()
		h.step(c)
		for _, step := range []struct {
			name    string
			advance time.Duration
			pruned  bool
		}{
			{"at its expiry plus KeepFinal", 2 * time.Hour, false},
			{"a millisecond later, a millisecond after the last prune", time.Millisecond, false},
			{"a minute after the last prune", time.Minute - time.Millisecond, true},
		} {
			h.now = h.now.Add(step.advance)
			from := len(h.out)
			h.step()
			if n := tombstones(h, from); n != map[bool]int{true: 1}[step.pruned] {
				t.Fatalf("%s: %d tombstones, want pruned %v", step.name, n, step.pruned)
			}
		}
	})
	t.Run("an entry without an expiry is never pruned", func(t *testing.T) {
		h := newHarness(t, Policy{KeepFinal: time.Hour})
		b, err := schemas.Encode(&schemas.SinkEntry{DeliveryID: "old", Status: schemas.SinkFinal, Attempt: 1, Outcome: schemas.OutcomeDelivered})
		must(t, err)
		must(t, h.task.Restore(&kgo.Record{Key: []byte("old"), Value: b}))
		h.step()
		h.now = h.now.Add(48 * time.Hour)
		h.step(cmd("old"))
		if n := tombstones(h, 0); n != 0 || h.prov.calls["old"] != 0 {
			t.Fatalf("%d tombstones, %d calls: the entry was pruned and its repeat sent", n, h.prov.calls["old"])
		}
		if got := h.on(h.rt.topics.Decisions); len(got) != 1 {
			t.Fatalf("decisions %v, want the repeat's duplicate", got)
		}
	})
}

func itoas(ns []int) []string {
	var s []string
	for _, n := range ns {
		s = append(s, itoa(n))
	}
	return s
}
