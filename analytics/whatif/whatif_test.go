package whatif_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/analytics/whatif"
	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
)

// t0 is 2026-06-01T12:00:00Z, a Monday noon in UTC.
var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC).UnixMilli()

const (
	sec  = int64(1000)
	mins = 60 * sec
	hour = 60 * mins
)

func window(d int64) whatif.Policy {
	return whatif.Policy{Dedupe: dedupe.Policy{DefaultWindowMs: d, IdempotencyTTLMs: 24 * hour}}
}

// req is a request with a dedupe key, at t0+at, in partition 0; its
// offset is set by build.
func req(typ, recipient, key string, at int64) whatif.Request {
	r := schemas.Request{RequestID: identity.NewRandomID(), Tenant: "acme", Type: typ, Recipient: recipient,
		Title: "t " + key, Body: "b", Channels: []string{"feed"}, DedupeKey: key, IDSource: "dedupe_key",
		NotificationID: identity.DedupeID("acme", typ, recipient, key)}
	return whatif.Request{At: t0 + at, Request: r}
}

func idem(typ, recipient, key string, at int64) whatif.Request {
	r := schemas.Request{RequestID: identity.NewRandomID(), Tenant: "acme", Type: typ, Recipient: recipient,
		Title: "t " + key, Body: "b", Channels: []string{"feed"}, IdempotencyKey: key, IDSource: "idempotency_key",
		NotificationID: identity.IdempotencyID("acme", typ, recipient, key)}
	return whatif.Request{At: t0 + at, Request: r}
}

func random(typ, recipient string, at int64) whatif.Request {
	r := schemas.Request{RequestID: identity.NewRandomID(), Tenant: "acme", Type: typ, Recipient: recipient,
		Title: "random", Body: "b", Channels: []string{"feed"}, IDSource: "random", NotificationID: identity.NewRandomID()}
	return whatif.Request{At: t0 + at, Request: r}
}

// push asks for the apns channel too.
func push(r whatif.Request) whatif.Request {
	r.Request.Channels = []string{"apns", "feed"}
	return r
}

func warm(r whatif.Request) whatif.Request            { r.Warmup = true; return r }
func inPart(p int32, r whatif.Request) whatif.Request { r.Partition = p; return r }

// build numbers the requests' offsets per partition in the order given.
func build(rs ...whatif.Request) []whatif.Request {
	next := map[int32]int64{}
	for i := range rs {
		rs[i].Offset = next[rs[i].Partition]
		next[rs[i].Partition]++
	}
	return rs
}

// changes lists the report's changes as "type key then → now", in time order.
func changes(rep *whatif.Report) []string {
	var out []string
	for _, c := range rep.Samples {
		out = append(out, fmt.Sprintf("%s %s → %s", c.Type, c.Then, c.Now))
	}
	return out
}

func TestWhatIfReportsWhatAnotherPolicyWouldChange(t *testing.T) {
	ios := route.Recipient{Devices: []schemas.Device{{Tenant: "acme", Recipient: "u1", DeviceID: "d1", Platform: "ios", Token: "tok", Enabled: true}}}
	night := ios
	night.Prefs = &schemas.Preferences{Tenant: "acme", Recipient: "u1", QuietHours: &schemas.QuietHours{Start: "11:00", End: "13:00", TimeZone: "UTC"}}
	limited := window(hour)
	limited.Route.Rates = map[string]route.RateLimit{"chat": {Max: 1, WindowMs: hour}}
	digests := window(hour)
	digests.Route.Digests = map[string]route.Digest{"chat": {WindowMs: 15 * mins}}
	urgent := window(hour)
	urgent.Route.Urgent = map[string]bool{"chat": true}
	perType := window(hour)
	perType.Dedupe.TypeWindowMs = map[string]int64{"invoice": mins}
	shortTTL := window(hour)
	shortTTL.Dedupe.IdempotencyTTLMs = hour

	cases := []struct {
		name      string
		then, now whatif.Policy
		reqs      []whatif.Request
		dir       []whatif.DirectoryChange
		want      []string // the changes, in time order
	}{
		{"the same policy changes nothing", window(10 * mins), window(10 * mins),
			build(req("invoice", "u1", "a", 0), req("invoice", "u1", "a", 30*sec), req("invoice", "u1", "a", 5*mins)), nil, nil},
		{"a window shortened from 10 min to 1 min lets through the repeats between 1 and 10 minutes apart",
			window(10 * mins), window(mins),
			build(req("invoice", "u1", "a", 0), req("invoice", "u1", "a", 30*sec), req("invoice", "u1", "a", 5*mins),
				req("invoice", "u1", "b", 0), req("invoice", "u1", "b", 59*sec), req("invoice", "u1", "b", 20*mins)),
			nil, []string{"invoice duplicate → accepted, routed"}},
		{"a window lengthened from 1 min to 10 min catches the repeats between 1 and 10 minutes apart",
			window(mins), window(10 * mins),
			build(req("invoice", "u1", "a", 0), req("invoice", "u1", "a", 30*sec), req("invoice", "u1", "a", 5*mins),
				req("invoice", "u1", "b", 0), req("invoice", "u1", "b", 20*mins)),
			nil, []string{"invoice accepted, routed → duplicate"}},
		{"a window of exactly the gap lets the repeat through, as the stage does at the window's end",
			window(10 * mins), window(5 * mins),
			build(req("invoice", "u1", "a", 0), req("invoice", "u1", "a", 5*mins)), nil, []string{"invoice duplicate → accepted, routed"}},
		{"a per-type window changes that type only",
			window(hour), perType,
			build(req("invoice", "u1", "a", 0), req("invoice", "u1", "a", 5*mins), req("order", "u1", "a", 0), req("order", "u1", "a", 5*mins)),
			nil, []string{"invoice duplicate → accepted, routed"}},
		{"a shorter idempotency TTL turns a late replay into a new notification",
			window(hour), shortTTL,
			build(idem("payment", "u1", "k", 0), idem("payment", "u1", "k", 10*mins), idem("payment", "u1", "k", 2*hour)),
			nil, []string{"payment idempotent_replay → accepted, routed"}},
		{"random ids are never duplicates under any window",
			window(mins), window(24 * hour),
			build(random("chat", "u1", 0), random("chat", "u1", sec)), nil, nil},
		{"an original in the warm-up still catches its repeat in the window",
			window(10 * mins), window(mins),
			build(warm(req("invoice", "u1", "a", 0)), req("invoice", "u1", "a", 30*sec), req("invoice", "u1", "a", 5*mins)),
			nil, []string{"invoice duplicate → accepted, routed"}},
		{"a request in the warm-up is never reported, even when it changed",
			window(10 * mins), window(mins),
			build(warm(req("invoice", "u1", "a", 0)), warm(req("invoice", "u1", "a", 5*mins)), req("invoice", "u1", "z", 6*mins)), nil, nil},
		{"seen-sets are per partition: an idempotency key reused with another dedupe key in another partition is never caught",
			window(hour), window(2 * hour),
			build(func() whatif.Request { r := req("invoice", "u1", "a", 0); r.Request.IdempotencyKey = "k"; return r }(),
				inPart(1, func() whatif.Request { r := req("invoice", "u1", "b", mins); r.Request.IdempotencyKey = "k"; return r }()),
				req("invoice", "u1", "a", 90*mins)),
			nil, []string{"invoice accepted, routed → duplicate"}},
		{"a new rate limit drops the second notification of the hour",
			window(hour), limited,
			build(random("chat", "u1", 0), random("chat", "u1", mins), random("chat", "u1", hour)),
			nil, []string{"chat accepted, routed → accepted, rate_limited"}},
		{"a removed rate limit lets it through again", limited, window(hour),
			build(random("chat", "u1", 0), random("chat", "u1", mins)), nil, []string{"chat accepted, rate_limited → accepted, routed"}},
		{"a new digest holds every notification of the type",
			window(hour), digests,
			build(random("chat", "u1", 0), random("invoice", "u1", mins)),
			nil, []string{"chat accepted, routed → accepted, digested"}},
		{"a duplicate never reaches a rate limit under either policy",
			window(hour), limited,
			build(req("chat", "u1", "a", 0), req("chat", "u1", "a", mins)), nil, nil},
		{"dropping an urgent type defers its pushes in quiet hours, with the devices of that time",
			urgent, window(hour),
			build(push(random("chat", "u1", 0)), push(random("chat", "u1", 2*hour))),
			[]whatif.DirectoryChange{{At: t0 - hour, Key: schemas.RecipientKey("acme", "u1"), Who: night}, {At: t0 + hour, Key: schemas.RecipientKey("acme", "u1"), Who: ios}},
			[]string{"chat accepted, routed → accepted, deferred"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := whatif.Run(whatif.Input{Then: c.then, Now: c.now, Requests: c.reqs, Directory: c.dir, Samples: 100})
			if got := changes(rep); !slices.Equal(got, c.want) {
				t.Fatalf("changes %q, want %q", got, c.want)
			}
			if rep.Changed != len(c.want) {
				t.Fatalf("Changed = %d, want %d", rep.Changed, len(c.want))
			}
			warmup := 0
			for _, r := range c.reqs {
				if r.Warmup {
					warmup++
				}
			}
			if rep.Warmup != warmup || rep.Requests != len(c.reqs)-warmup {
				t.Fatalf("requests %d, warm-up %d; want %d, %d", rep.Requests, rep.Warmup, len(c.reqs)-warmup, warmup)
			}
		})
	}
}

func TestWhatIfCountsByTypeAndReason(t *testing.T) {
	reqs := build(
		req("invoice", "u1", "a", 0), req("invoice", "u1", "a", 30*sec), req("invoice", "u1", "a", 5*mins),
		req("invoice", "u2", "b", 0), req("invoice", "u2", "b", 3*mins),
		req("order", "u1", "o", 0), req("order", "u1", "o", 20*sec),
	)
	rep := whatif.Run(whatif.Input{Then: window(10 * mins), Now: window(mins), Requests: reqs})

	t.Run("hit rates are hits over hits and misses, per type, under each policy", func(t *testing.T) {
		got := map[string]string{}
		for _, tr := range rep.Types {
			got[tr.Type] = fmt.Sprintf("%d requests, %d changed, %.2f → %.2f, %d → %d duplicates",
				tr.Requests, tr.Changed, tr.HitRateThen, tr.HitRateNow, tr.Then["duplicate"], tr.Now["duplicate"])
		}
		want := map[string]string{
			"invoice": "5 requests, 2 changed, 0.60 → 0.20, 3 → 1 duplicates",
			"order":   "2 requests, 0 changed, 0.50 → 0.50, 1 → 1 duplicates",
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("types %v, want %v", got, want)
		}
	})
	t.Run("reasons count each kind of change, in words", func(t *testing.T) {
		if len(rep.Reasons) != 1 {
			t.Fatalf("reasons %+v, want one", rep.Reasons)
		}
		r := rep.Reasons[0]
		if r.Then != "duplicate" || r.Now != "accepted, routed" || r.Count != 2 || !strings.Contains(r.Words, "let through now") {
			t.Fatalf("reason %+v, want 2 duplicates let through now", r)
		}
	})
	t.Run("a changed sample names the request and both decisions", func(t *testing.T) {
		s := rep.Samples[0]
		if s.NotificationID != reqs[4].Request.NotificationID || s.Recipient != "u2" || !strings.Contains(s.Then.Detail, reqs[3].Request.RequestID) {
			t.Fatalf("first sample %+v, want the repeat of b (3 minutes) naming its original %s", s, reqs[3].Request.RequestID)
		}
	})
	t.Run("without recorded outcomes there is no recorded hit rate", func(t *testing.T) {
		if rep.Recorded != 0 || rep.Types[0].HitRateRecorded != -1 {
			t.Fatalf("recorded %d, rate %v; want none", rep.Recorded, rep.Types[0].HitRateRecorded)
		}
	})
}

func TestWhatIfComparesThenWithTheRecord(t *testing.T) {
	reqs := build(req("invoice", "u1", "a", 0), req("invoice", "u1", "a", 5*mins), req("invoice", "u1", "c", 0))
	reqs[0].Recorded, reqs[1].Recorded = schemas.DecisionAccepted, schemas.DecisionDuplicate
	cases := []struct {
		name       string
		then       whatif.Policy
		mismatches int
	}{
		{"the live policy reproduces the record", window(10 * mins), 0},
		{"a policy that is not the live one shows as mismatches", window(mins), 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := whatif.Run(whatif.Input{Then: c.then, Now: window(mins), Requests: reqs})
			if rep.Recorded != 2 || rep.Mismatches != c.mismatches || len(rep.MismatchSamples) != c.mismatches {
				t.Fatalf("recorded %d, mismatches %d (%v); want 2, %d", rep.Recorded, rep.Mismatches, rep.MismatchSamples, c.mismatches)
			}
			if got := rep.Types[0].HitRateRecorded; got != 0.5 {
				t.Fatalf("recorded hit rate %v, want 0.5", got)
			}
		})
	}
}

func TestWhatIfSamplesEveryKindOfChangeFirst(t *testing.T) {
	var rs []whatif.Request
	for i := range 20 {
		key := fmt.Sprint("k", i)
		rs = append(rs, req("invoice", "u1", key, int64(i)*hour), req("invoice", "u1", key, int64(i)*hour+5*mins))
	}
	limited := window(mins)
	limited.Route.Rates = map[string]route.RateLimit{"chat": {Max: 1, WindowMs: hour}}
	rs = append(rs, random("chat", "u9", 30*hour), random("chat", "u9", 30*hour+sec))
	rep := whatif.Run(whatif.Input{Then: window(10 * mins), Now: limited, Requests: build(rs...), Samples: 3})
	if rep.Changed != 21 || len(rep.Samples) != 3 {
		t.Fatalf("changed %d with %d samples, want 21 and 3", rep.Changed, len(rep.Samples))
	}
	if last := rep.Samples[2]; last.Now.Route != schemas.DecisionRateLimited {
		t.Fatalf("samples %v lack the one rate-limited change", changes(rep))
	}
}

func TestWarmupCoversTheLongestWindowOfEitherPolicy(t *testing.T) {
	limited := window(mins)
	limited.Route.Rates = map[string]route.RateLimit{"chat": {Max: 1, WindowMs: 48 * hour}}
	typed := window(mins)
	typed.Dedupe.TypeWindowMs = map[string]int64{"x": 30 * hour}
	digest := window(mins)
	digest.Route.Digests = map[string]route.Digest{"x": {WindowMs: 72 * hour}}
	cases := []struct {
		name string
		ps   []whatif.Policy
		want time.Duration
	}{
		{"the idempotency TTL when it is the longest", []whatif.Policy{window(mins), window(hour)}, 24 * time.Hour},
		{"a rate window of the candidate", []whatif.Policy{window(mins), limited}, 48 * time.Hour},
		{"a type's window", []whatif.Policy{typed}, 30 * time.Hour},
		{"a digest window", []whatif.Policy{digest, window(mins)}, 72 * time.Hour},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := whatif.WarmupFor(c.ps...); got != c.want {
				t.Fatalf("WarmupFor = %v, want %v", got, c.want)
			}
		})
	}
}
