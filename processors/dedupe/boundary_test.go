package dedupe

import (
	"encoding/json"
	"testing"

	"github.com/heraldhq/herald/schemas"
)

// seenAt decides first at time 0 on an empty seen-set and keeps its entries
// as they are, never tombstoned: what a lookup sees between an entry's
// expiry and its tombstone (the API's explain replica, a partition whose
// stream time has not moved).
func seenAt(p Policy, first schemas.Request) Lookup {
	res := p.Decide(first, 0, Source{Topic: "requests", Offset: 0}, func(string) (schemas.SeenEntry, bool) { return schemas.SeenEntry{}, false })
	m := map[string]schemas.SeenEntry{}
	for _, c := range res.Seen {
		m[c.Key] = *c.Entry
	}
	return func(k string) (schemas.SeenEntry, bool) { e, ok := m[k]; return e, ok }
}

func TestAnEntryIsLiveUntilTheMillisecondItsWindowEnds(t *testing.T) {
	p := Policy{DefaultWindowMs: 1000, TypeWindowMs: map[string]int64{"slow": 5000}, IdempotencyTTLMs: 3000}
	dedupe := req("a", "k1", "")
	idem := req("a", "", "i1")
	typed := req("a", "k2", "")
	typed.Type = "slow"
	typed = retenant(typed, typed.Tenant)
	own := req("a", "k3", "")
	own.DedupeWindowMs = 200
	ownTTL := req("a", "", "i2")
	ownTTL.IdempotencyTTLMs = 100
	cases := []struct {
		name  string
		r     schemas.Request
		at    int64
		wantO string
	}{
		{"a dedupe key one millisecond before its window ends is a duplicate", dedupe, 999, schemas.DecisionDuplicate},
		{"a dedupe key at the end of its window is new", dedupe, 1000, schemas.DecisionAccepted},
		{"an idempotency key one millisecond before its TTL ends is replayed", idem, 2999, schemas.DecisionIdempotentReplay},
		{"an idempotency key at the end of its TTL is new", idem, 3000, schemas.DecisionAccepted},
		{"a type's own window applies to its dedupe keys", typed, 4999, schemas.DecisionDuplicate},
		{"a type's own window ends on time", typed, 5000, schemas.DecisionAccepted},
		{"a request's own window overrides the default", own, 199, schemas.DecisionDuplicate},
		{"a request's own window ends on time", own, 200, schemas.DecisionAccepted},
		{"a request's own TTL overrides the default", ownTTL, 99, schemas.DecisionIdempotentReplay},
		{"a request's own TTL ends on time", ownTTL, 100, schemas.DecisionAccepted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lookup := seenAt(p, c.r)
			repeat := c.r
			repeat.RequestID = "another call"
			res := p.Decide(repeat, c.at, Source{Topic: "requests", Offset: 1}, lookup)
			if res.Decision.Outcome != c.wantO {
				t.Fatalf("at %d ms: %s, want %s", c.at, res.Decision.Outcome, c.wantO)
			}
			if (res.Accepted != nil) != (c.wantO == schemas.DecisionAccepted) {
				t.Fatalf("accepted record %v for outcome %s", res.Accepted, c.wantO)
			}
		})
	}
}

func TestTheDecisionAtTheSamePositionIsAlreadyApplied(t *testing.T) {
	p := DefaultPolicy()
	for _, r := range []schemas.Request{req("a", "k1", ""), req("a", "", "i1"), req("a", "k1", "i1")} {
		lookup := seenAt(p, r)
		res := p.Decide(r, 10, Source{Topic: "requests", Offset: 0}, lookup)
		if !res.AlreadyApplied || len(res.Seen) != 0 || res.Accepted != nil {
			t.Fatalf("the same record decided again: %+v, want AlreadyApplied and nothing emitted", res)
		}
		other := p.Decide(r, 10, Source{Topic: "requests", Partition: 1, Offset: 0}, lookup)
		if other.AlreadyApplied {
			t.Fatal("the same offset of another partition counted as already applied")
		}
	}
}

func TestAChangeToAnyPartOfTheContentIsAConflict(t *testing.T) {
	p := DefaultPolicy()
	base := req("paid", "", "evt_1")
	base.Payload = json.RawMessage(`{"amount":1,"currency":"EUR"}`)
	cases := []struct {
		name   string
		change func(*schemas.Request)
		want   string
	}{
		{"the same content is a replay", func(*schemas.Request) {}, schemas.DecisionIdempotentReplay},
		{"the same payload with its keys reordered and spaced is a replay",
			func(r *schemas.Request) { r.Payload = json.RawMessage(`{ "currency": "EUR", "amount": 1 }`) }, schemas.DecisionIdempotentReplay},
		{"a payload-only change is a conflict", func(r *schemas.Request) { r.Payload = json.RawMessage(`{"amount":2,"currency":"EUR"}`) }, schemas.DecisionIdempotencyConflict},
		{"a payload beyond float64 precision changed in its last digit is a conflict", func(r *schemas.Request) {
			r.Payload = json.RawMessage(`{"amount":9007199254740993,"currency":"EUR"}`)
		}, schemas.DecisionIdempotencyConflict},
		{"a payload removed is a conflict", func(r *schemas.Request) { r.Payload = nil }, schemas.DecisionIdempotencyConflict},
		{"a body change is a conflict", func(r *schemas.Request) { r.Body = "other" }, schemas.DecisionIdempotencyConflict},
		{"a locale change is a conflict", func(r *schemas.Request) { r.Locale = "fr-FR" }, schemas.DecisionIdempotencyConflict},
		{"a channel change is a conflict", func(r *schemas.Request) { r.Channels = []string{"apns"} }, schemas.DecisionIdempotencyConflict},
		{"another target device is a conflict", func(r *schemas.Request) { r.TargetDevice = "d1" }, schemas.DecisionIdempotencyConflict},
		{"another producer and request id are not content", func(r *schemas.Request) { r.Producer, r.RequestID = "billing", "r2" }, schemas.DecisionIdempotentReplay},
	}
	lookup := seenAt(p, base)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := base
			c.change(&r)
			res := p.Decide(r, 1000, Source{Topic: "requests", Offset: 1}, lookup)
			if res.Decision.Outcome != c.want {
				t.Fatalf("%s, want %s", res.Decision.Outcome, c.want)
			}
			if res.Accepted != nil || len(res.Seen) != 0 {
				t.Fatalf("a repeat emitted %+v", res)
			}
		})
	}
}

func TestEveryUndecidableRequestIsRejectedWithItsReason(t *testing.T) {
	cases := []struct {
		name   string
		r      func() schemas.Request
		reason string
	}{
		{"a request without a tenant is rejected", func() schemas.Request { r := req("x", "k", ""); r.Tenant = ""; return r }, "tenant is empty"},
		{"a request without a type is rejected", func() schemas.Request { r := req("x", "k", ""); r.Type = ""; return r }, "type is empty"},
		{"a request without a recipient is rejected", func() schemas.Request { r := req("x", "k", ""); r.Recipient = ""; return r }, "recipient is empty"},
		{"a request whose id is not an id is rejected", func() schemas.Request { r := req("x", "", ""); r.NotificationID = "ABC"; return r },
			"notificationId is not 32 lower-case hex characters"},
		{"a request whose id is not its dedupe key's is rejected", func() schemas.Request {
			r := req("x", "k", "")
			r.DedupeKey = "other"
			return r
		}, "notificationId is not the id of its dedupeKey"},
		{"a request whose id is not its idempotency key's is rejected", func() schemas.Request {
			r := req("x", "", "i")
			r.IdempotencyKey = "other"
			return r
		}, "notificationId is not the id of its idempotencyKey"},
		{"an id from an idempotency key is refused when a dedupe key names the notification", func() schemas.Request {
			r := req("x", "", "i")
			r.DedupeKey = "k"
			return r
		}, "notificationId is not the id of its idempotencyKey"},
		{"a negative window is rejected", func() schemas.Request { r := req("x", "k", ""); r.DedupeWindowMs = -1; return r }, "dedupeWindowMs is negative"},
		{"a negative TTL is rejected", func() schemas.Request { r := req("x", "", "i"); r.IdempotencyTTLMs = -1; return r }, "idempotencyTtlMs is negative"},
		{"a random id with no key is decided", func() schemas.Request { return req("x", "", "") }, ""},
		{"a zero window and TTL are the defaults, not errors", func() schemas.Request { return req("x", "k", "i") }, ""},
	}
	p := DefaultPolicy()
	empty := func(string) (schemas.SeenEntry, bool) { return schemas.SeenEntry{}, false }
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := p.Decide(c.r(), 1, Source{Topic: "requests"}, empty)
			if c.reason == "" {
				if res.Decision.Outcome != schemas.DecisionAccepted {
					t.Fatalf("%s (%s), want accepted", res.Decision.Outcome, res.Decision.Detail)
				}
				return
			}
			if res.Decision.Outcome != schemas.DecisionRejected || res.Decision.Detail != c.reason || res.Accepted != nil || len(res.Seen) != 0 {
				t.Fatalf("%s %q (accepted %v, seen %d), want rejected: %s", res.Decision.Outcome, res.Decision.Detail, res.Accepted != nil, len(res.Seen), c.reason)
			}
		})
	}
}
