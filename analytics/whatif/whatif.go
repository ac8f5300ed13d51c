// Package whatif owns the core of `herald replay --what-if`: it re-decides
// a window of herald.requests under two policies, the one in force ("then")
// and a candidate ("now"), with the dedupe and route stages' own decision
// code, and reports what would change. It is a pure function of its Input:
// no Kafka, no clock, no output anywhere (analytics/replay reads the input
// and prints the Report).
//
// Semantics.
//
//   - Each request is decided by dedupe.Policy.Decide over a seen-set held
//     per partition of herald.requests, in offset order, as the live stage
//     decides it (an idempotency key reused with another dedupeKey lands in
//     another partition and is not caught, live or here).
//   - Every notification a policy accepts goes through the route stage's
//     Task (rate limits, digests, preferences, fan-out, quiet hours) under
//     that policy's route half, in record-time order (ties by partition and
//     offset), with the recipients' devices and preferences as they were at
//     that time (Input.Directory, applied in time order). A request's
//     outcome is its dedupe outcome, and for an accepted one also the route
//     stage's first decision about it (routed, rate_limited, digested,
//     deferred, opted_out, no_target).
//   - A request changed when its outcome under Now differs from its outcome
//     under Then. Changes are counted by type and by reason (the pair of
//     outcomes, e.g. "duplicate → accepted, routed": a repeat the candidate
//     would send again), with the dedup hit rate per type under each
//     policy: hits (duplicate, idempotent_replay) over hits and misses
//     (accepted), as analytics/queries' hit_rate_by_type_7d counts them.
//   - Then is re-decided, not read: it is what the live stage decided when
//     Then is the live policy (herald replay checks that). When the input
//     carries the recorded outcomes (Request.Recorded, from the audit), the
//     report also gives the recorded hit rate and counts the requests whose
//     re-decided Then differs from the record: a Then that is not the live
//     policy, or a warm-up too short (below).
//
// Warm-up. A window that starts mid-stream misses the state built before
// it: the originals of its first duplicates, the rate counters and open
// digests of its first hour. So the caller feeds the requests of a warm-up
// period before the window (Request.Warmup): they are decided under both
// policies, in full, and build the seen-sets and route state, but are not
// reported. The caller picks its length with WarmupFor: the longest dedupe
// window, idempotency TTL, rate or digest window of either policy, so every
// seen entry and every counter live at the window's start was made by a
// request that was read.
//
// Hazards.
//   - A warm-up of one window is not the whole history: a key repeated
//     every half window since before the warm-up is decided from the
//     warm-up's start as if the policy began there. Its first decisions in
//     the window can then differ from "the policy had always been in
//     force". A longer warm-up narrows that; the recorded mismatch count
//     shows it for Then.
//   - A request's own dedupeWindowMs or idempotencyTtlMs longer than the
//     warm-up is not covered by it.
//   - Route order: the live route stage reads herald.accepted in the order
//     the dedupe stage wrote it (per recipient partition), and fires timers
//     on its partition's stream time and on the wall clock. Here one task
//     reads every accepted notification in record-time order and fires on
//     that stream time. Decisions differ only for records stamped out of
//     order (a digest a late record would join); see processors/route.
//   - The window is held in memory: every request of the window and its
//     warm-up, plus both policies' state.
//   - Devices and preferences are as Input.Directory says: a change not in
//     it (compacted away before the read) is missing. Compaction keeps the
//     latest of each recipient, so the route's fan-out and quiet hours of
//     old requests may use newer devices than the live stage did; outcomes
//     of the dedupe stage, rate limits and digests do not depend on them.
package whatif

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// Policy is what both stages decide with.
type Policy struct {
	Dedupe dedupe.Policy
	Route  route.Policy
}

// Request is one record of herald.requests.
type Request struct {
	Partition int32
	Offset    int64
	// At is the record time (ms), the time the stage decides with.
	At      int64
	Request schemas.Request
	// Warmup requests build state and are not reported.
	Warmup bool
	// Recorded is the dedupe outcome the audit holds for this request, or
	// "" when unknown.
	Recorded string
}

// DirectoryChange is what is known of one recipient from At on.
type DirectoryChange struct {
	At int64
	// Key is the recipient's schemas.RecipientKey(tenant, recipient).
	Key string
	Who route.Recipient
}

// Input is everything a what-if decides from.
type Input struct {
	Then, Now Policy
	// Requests in any order; Run orders them.
	Requests  []Request
	Directory []DirectoryChange
	// Samples is how many changed requests the report lists (default 10).
	Samples int
}

// Outcome is what happened to one request under one policy.
type Outcome struct {
	// Dedupe is the dedupe stage's outcome.
	Dedupe string `json:"dedupe"`
	// Route is the route stage's first decision about an accepted request
	// ("" otherwise).
	Route string `json:"route,omitempty"`
	// Detail says why (the original repeated, the limit, the digest, the
	// end of quiet hours).
	Detail string `json:"detail,omitempty"`
}

// String is the outcome in words: "duplicate", "accepted, rate_limited".
func (o Outcome) String() string {
	if o.Route == "" {
		return o.Dedupe
	}
	return o.Dedupe + ", " + o.Route
}

func (o Outcome) same(p Outcome) bool { return o.Dedupe == p.Dedupe && o.Route == p.Route }

// Change is one request decided differently.
type Change struct {
	NotificationID string  `json:"notificationId"`
	RequestID      string  `json:"requestId"`
	Tenant         string  `json:"tenant"`
	Type           string  `json:"type"`
	Recipient      string  `json:"recipient"`
	At             int64   `json:"at"`
	Partition      int32   `json:"partition"`
	Offset         int64   `json:"offset"`
	Then           Outcome `json:"then"`
	Now            Outcome `json:"now"`
}

// TypeReport is one type's requests in the window.
type TypeReport struct {
	Type     string `json:"type"`
	Requests int    `json:"requests"`
	Changed  int    `json:"changed"`
	// Then and Now count outcomes: dedupe outcomes, and route outcomes of
	// the accepted ones (so "accepted" and "routed" both count one
	// request).
	Then map[string]int `json:"then"`
	Now  map[string]int `json:"now"`
	// Recorded counts the audit's dedupe outcomes, when known.
	Recorded map[string]int `json:"recorded,omitempty"`
	// Hit rates: hits / (hits + misses); -1 when there is neither.
	HitRateThen     float64 `json:"hitRateThen"`
	HitRateNow      float64 `json:"hitRateNow"`
	HitRateRecorded float64 `json:"hitRateRecorded"`
}

// Reason is one kind of change and how many requests it applies to.
type Reason struct {
	Then  string `json:"then"`
	Now   string `json:"now"`
	Count int    `json:"count"`
	// Words says what the change means to a user.
	Words string `json:"words"`
}

// Report is what a what-if found.
type Report struct {
	// Requests reported (in the window), and read for the warm-up only.
	Requests int `json:"requests"`
	Warmup   int `json:"warmupRequests"`
	// Changed counts the requests decided differently.
	Changed int `json:"changed"`
	// Recorded counts the requests in the window with a recorded outcome;
	// Mismatches those whose outcome under Then differs from it, and
	// MismatchSamples lists a few (Now holding the recorded outcome).
	Recorded        int          `json:"recorded"`
	Mismatches      int          `json:"mismatches"`
	MismatchSamples []Change     `json:"mismatchSamples,omitempty"`
	Types           []TypeReport `json:"types"`
	Reasons         []Reason     `json:"reasons"`
	Samples         []Change     `json:"samples"`
}

// WarmupFor is the warm-up a window needs under both policies: the longest
// dedupe window, idempotency TTL, rate window or digest window of either.
func WarmupFor(ps ...Policy) time.Duration {
	var ms int64
	for _, p := range ps {
		ms = max(ms, p.Dedupe.DefaultWindowMs, p.Dedupe.IdempotencyTTLMs)
		for _, w := range p.Dedupe.TypeWindowMs {
			ms = max(ms, w)
		}
		for _, r := range p.Route.Rates {
			ms = max(ms, r.WindowMs)
		}
		for _, d := range p.Route.Digests {
			ms = max(ms, d.WindowMs)
		}
	}
	return time.Duration(ms) * time.Millisecond
}

// Run decides every request under both policies and compares.
func Run(in Input) *Report {
	reqs := slices.Clone(in.Requests)
	// Offset order within a partition, as the dedupe stage reads it.
	slices.SortStableFunc(reqs, func(a, b Request) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	then := decideAll(in.Then, reqs, in.Directory)
	now := decideAll(in.Now, reqs, in.Directory)

	samples := in.Samples
	if samples <= 0 {
		samples = 10
	}
	rep := &Report{}
	types := map[string]*TypeReport{}
	reasons := map[[2]string]*Reason{}
	var changes []Change
	for i, r := range reqs {
		if r.Warmup {
			rep.Warmup++
			continue
		}
		rep.Requests++
		tr := types[r.Request.Type]
		if tr == nil {
			tr = &TypeReport{Type: r.Request.Type, Then: map[string]int{}, Now: map[string]int{}}
			types[r.Request.Type] = tr
		}
		tr.Requests++
		count(tr.Then, then[i])
		count(tr.Now, now[i])
		c := Change{NotificationID: r.Request.NotificationID, RequestID: r.Request.RequestID, Tenant: r.Request.Tenant,
			Type: r.Request.Type, Recipient: r.Request.Recipient, At: r.At, Partition: r.Partition, Offset: r.Offset,
			Then: then[i], Now: now[i]}
		if r.Recorded != "" {
			rep.Recorded++
			if tr.Recorded == nil {
				tr.Recorded = map[string]int{}
			}
			tr.Recorded[r.Recorded]++
			if r.Recorded != then[i].Dedupe {
				rep.Mismatches++
				if len(rep.MismatchSamples) < samples {
					m := c
					m.Now = Outcome{Dedupe: r.Recorded}
					rep.MismatchSamples = append(rep.MismatchSamples, m)
				}
			}
		}
		if then[i].same(now[i]) {
			continue
		}
		rep.Changed++
		tr.Changed++
		k := [2]string{then[i].String(), now[i].String()}
		if reasons[k] == nil {
			reasons[k] = &Reason{Then: k[0], Now: k[1], Words: words(then[i], now[i])}
		}
		reasons[k].Count++
		changes = append(changes, c)
	}
	for _, tr := range types {
		tr.HitRateThen, tr.HitRateNow, tr.HitRateRecorded = hitRate(tr.Then), hitRate(tr.Now), hitRate(tr.Recorded)
		rep.Types = append(rep.Types, *tr)
	}
	sort.Slice(rep.Types, func(i, j int) bool { return rep.Types[i].Type < rep.Types[j].Type })
	for _, r := range reasons {
		rep.Reasons = append(rep.Reasons, *r)
	}
	sort.Slice(rep.Reasons, func(i, j int) bool {
		a, b := rep.Reasons[i], rep.Reasons[j]
		return cmp.Or(-cmp.Compare(a.Count, b.Count), cmp.Compare(a.Then, b.Then), cmp.Compare(a.Now, b.Now)) < 0
	})
	rep.Samples = sampleChanges(changes, samples)
	return rep
}

func count(m map[string]int, o Outcome) {
	m[o.Dedupe]++
	if o.Route != "" {
		m[o.Route]++
	}
}

// hitRate is hits / (hits + misses), or -1 when there is neither.
func hitRate(m map[string]int) float64 {
	hits := m[schemas.DecisionDuplicate] + m[schemas.DecisionIdempotentReplay]
	misses := m[schemas.DecisionAccepted]
	if hits+misses == 0 {
		return -1
	}
	return float64(hits) / float64(hits+misses)
}

// sampleChanges picks up to n changes, spread over the kinds of change
// (each reason's first, then its second, …), in time order.
func sampleChanges(changes []Change, n int) []Change {
	byReason := map[[2]string][]Change{}
	var order [][2]string
	for _, c := range changes {
		k := [2]string{c.Then.String(), c.Now.String()}
		if byReason[k] == nil {
			order = append(order, k)
		}
		byReason[k] = append(byReason[k], c)
	}
	var out []Change
	for round := 0; len(out) < n; round++ {
		took := false
		for _, k := range order {
			if cs := byReason[k]; round < len(cs) && len(out) < n {
				out = append(out, cs[round])
				took = true
			}
		}
		if !took {
			break
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return cmp.Or(cmp.Compare(out[i].At, out[j].At), cmp.Compare(out[i].Partition, out[j].Partition),
			cmp.Compare(out[i].Offset, out[j].Offset)) < 0
	})
	return out
}

// words says what a change means, from the user's side.
func words(then, now Outcome) string {
	hit := func(o Outcome) bool {
		return o.Dedupe == schemas.DecisionDuplicate || o.Dedupe == schemas.DecisionIdempotentReplay
	}
	if hit(then) && now.Dedupe == schemas.DecisionAccepted {
		return "a repeat caught then would be let through now"
	} else if then.Dedupe == schemas.DecisionAccepted && hit(now) {
		return "a repeat let through then would be caught now"
	} else if then.Dedupe != now.Dedupe {
		return fmt.Sprintf("decided %s then, %s now", then.Dedupe, now.Dedupe)
	}
	switch now.Route {
	case schemas.DecisionRateLimited:
		return "would now be dropped by a rate limit"
	case schemas.DecisionDigested:
		return "would now wait for a digest"
	case schemas.DecisionDeferred:
		return "would now be deferred by quiet hours"
	}
	switch then.Route {
	case schemas.DecisionRateLimited:
		return "would no longer be dropped by a rate limit"
	case schemas.DecisionDigested:
		return "would no longer wait for a digest"
	case schemas.DecisionDeferred:
		return "would no longer be deferred by quiet hours"
	}
	return fmt.Sprintf("routed %s then, %s now", then.Route, now.Route)
}

// sandbox topic names: the route task's outputs stay in memory, and these
// names could never be mistaken for live ones.
const (
	sandboxAccepted  = "herald-whatif-sandbox.accepted"
	sandboxDecisions = "herald-whatif-sandbox.decisions"
)

func sandboxTopics() route.Topics {
	t := route.Topics{Accepted: sandboxAccepted, Decisions: sandboxDecisions, Route: "herald-whatif-sandbox.route",
		Devices: "herald-whatif-sandbox.devices", Preferences: "herald-whatif-sandbox.preferences", Deliveries: map[string]string{}}
	for _, ch := range topics.Channels {
		t.Deliveries[ch] = "herald-whatif-sandbox.deliveries." + ch
	}
	return t
}

// accepted is a notification a policy accepted, for the route stage.
type accepted struct {
	req int // index in the requests
	at  int64
	n   schemas.Accepted
}

// decideAll returns every request's outcome under p; reqs are in
// (partition, offset) order.
func decideAll(p Policy, reqs []Request, dir []DirectoryChange) []Outcome {
	out := make([]Outcome, len(reqs))
	var acc []accepted
	seen := map[int32]map[string]schemas.SeenEntry{}
	for i, r := range reqs {
		set := seen[r.Partition]
		if set == nil {
			set = map[string]schemas.SeenEntry{}
			seen[r.Partition] = set
		}
		res := p.Dedupe.Decide(r.Request, r.At, dedupe.Source{Topic: "herald-whatif-sandbox.requests", Partition: r.Partition, Offset: r.Offset},
			func(key string) (schemas.SeenEntry, bool) { e, ok := set[key]; return e, ok })
		for _, c := range res.Seen {
			if c.Entry == nil {
				delete(set, c.Key)
			} else {
				set[c.Key] = *c.Entry
			}
		}
		d := res.Decision
		out[i] = Outcome{Dedupe: d.Outcome, Detail: dedupeDetail(d)}
		if res.Accepted != nil {
			acc = append(acc, accepted{req: i, at: r.At, n: *res.Accepted})
		}
	}
	routeAll(p.Route, reqs, acc, dir, out)
	return out
}

func dedupeDetail(d schemas.Decision) string {
	if d.Detail != "" {
		return d.Detail
	}
	if d.OriginalRequestID != "" {
		return fmt.Sprintf("repeats request %s of %s", d.OriginalRequestID, time.UnixMilli(d.OriginalAt).UTC().Format(time.RFC3339))
	}
	return ""
}

// routeAll runs the accepted notifications through one route task in
// record-time order and fills in their route outcomes.
func routeAll(p route.Policy, reqs []Request, acc []accepted, changes []DirectoryChange, out []Outcome) {
	slices.SortStableFunc(acc, func(a, b accepted) int {
		ra, rb := reqs[a.req], reqs[b.req]
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(ra.Partition, rb.Partition), cmp.Compare(ra.Offset, rb.Offset))
	})
	changes = slices.Clone(changes)
	slices.SortStableFunc(changes, func(a, b DirectoryChange) int { return cmp.Compare(a.At, b.At) })
	dir := route.StaticDirectory{}
	t := sandboxTopics()
	task := route.NewTask(p, t, 0, dir, nil)
	next := 0
	for i, a := range acc {
		for ; next < len(changes) && changes[next].At <= a.at; next++ {
			c := changes[next]
			dir[c.Key] = c.Who
		}
		v, err := schemas.Encode(&a.n)
		if err != nil {
			// An accepted record built from a decided request always
			// encodes; say so rather than drop it.
			out[a.req].Route, out[a.req].Detail = schemas.DecisionRejected, err.Error()
			continue
		}
		rec := &kgo.Record{Topic: sandboxAccepted, Partition: 0, Offset: int64(i), Value: v, Timestamp: time.UnixMilli(a.at)}
		var o stage.Out
		if err := task.Process(rec, &o); err != nil {
			out[a.req].Route, out[a.req].Detail = schemas.DecisionRejected, err.Error()
			task.Abort()
			continue
		}
		id := "route/" + sandboxAccepted + "/0/" + strconv.Itoa(i)
		for _, r := range o.Records() {
			if r.Topic != sandboxDecisions {
				continue
			}
			var d schemas.Decision
			if schemas.Decode(r.Value, &d) != nil || d.DecisionID != id {
				continue
			}
			out[a.req].Route = d.Outcome
			if d.Detail != "" {
				out[a.req].Detail = d.Detail
			}
		}
		task.Commit()
	}
}

// String describes p in words, each list sorted.
func (p Policy) String() string {
	ms := func(v int64) string { return (time.Duration(v) * time.Millisecond).String() }
	var b strings.Builder
	fmt.Fprintf(&b, "dedupe window %s", ms(p.Dedupe.DefaultWindowMs))
	if len(p.Dedupe.TypeWindowMs) > 0 {
		b.WriteString(" (" + list(p.Dedupe.TypeWindowMs, func(w int64) string { return ms(w) }) + ")")
	}
	fmt.Fprintf(&b, ", idempotency TTL %s", ms(p.Dedupe.IdempotencyTTLMs))
	if len(p.Route.Rates) == 0 {
		b.WriteString(", no rate limits")
	} else {
		b.WriteString(", rate limits " + list(p.Route.Rates, func(r route.RateLimit) string { return fmt.Sprintf("%d/%s", r.Max, ms(r.WindowMs)) }))
	}
	if len(p.Route.Digests) == 0 {
		b.WriteString(", no digests")
	} else {
		b.WriteString(", digests " + list(p.Route.Digests, func(d route.Digest) string {
			if d.Key != "" {
				return ms(d.WindowMs) + ":" + d.Key
			}
			return ms(d.WindowMs)
		}))
	}
	var urgent []string
	for typ, on := range p.Route.Urgent {
		if on {
			urgent = append(urgent, typ)
		}
	}
	sort.Strings(urgent)
	if len(urgent) == 0 {
		b.WriteString(", no urgent types")
	} else {
		b.WriteString(", urgent types " + strings.Join(urgent, ","))
	}
	return b.String()
}

// list is m as "k=v,k=v", sorted by key.
func list[V any](m map[string]V, f func(V) string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + f(m[k])
	}
	return strings.Join(keys, ",")
}
