package api

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/reply"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

// tracker is the API's read model of herald.requests, herald.decisions,
// herald.attempts, herald.outcomes and herald.receipts, consumed
// read_committed from Lookback ago: each notification's first request and
// its timeline (GET /v1/notifications/{id}: requests, decisions, the sinks'
// attempts, the deliveries' outcomes and the devices' receipts) and the
// accepted count per tenant (quotas). It is eventually consistent: a
// request the API has just written appears once the consumer reads it
// back, and a freshly started API shows a notification only once the
// consumer has read up to it.
//
// It holds up to MaxTracked notifications (100,000 by default), each note
// packed: its events are the record values they were read from, one copy
// each, decoded only when the notification is read (see note). The decisions
// that callers wait for (Prefer: wait, idempotency keys) come from a second
// consumer that reads only this instance's partition of herald.replies from
// its end (consumeLive), so they never wait for that catch-up.
type tracker struct {
	max    int
	quotaW int64 // quota window in ms; 0 without a quota
	// ownOnly: the read model consumer does not run (history comes from
	// the audit record, see history.go); the tracker caches this
	// instance's own sends and the replies to them.
	ownOnly bool

	mu      sync.Mutex
	notes   map[noteKey]*note
	order   []noteKey // insertion order, for eviction
	waiters map[string]*waiter
	// accepted counts accepted dedupe decisions per tenant in the quota
	// window that holds the newest decision time seen.
	accepted map[string]int64
	window   int64
	// liveFrom is where the live decisions consumer starts, per partition
	// of herald.decisions; set before either consumer starts, read-only
	// after.
	liveFrom map[int32]int64
	// dec reads the records the add functions place, into scratch; only
	// the read model's consumer (one goroutine) uses them. scratch is here,
	// not on the consumer's stack, where passing a record to the decoder
	// as a schemas.Record would move it to the heap each time.
	dec     schemas.Decoder
	scratch struct {
		req      schemas.Request
		decision schemas.Decision
		attempt  schemas.Attempt
		outcome  schemas.Outcome
		receipt  schemas.Receipt
	}
}

// noteKey scopes a notification id by tenant: canonical ids do not contain
// the tenant, so two tenants can send notifications with one id.
type noteKey struct{ tenant, id string }

// note is one notification's read model, packed: each event is the value
// of the record it was read from, as it was on its topic (a copy of its
// own), decoded when the notification is read (GET
// /v1/notifications/{id}, rare beside the records that build the model).
// A note thus holds a few pointers however many strings its records
// carry, and the pointers the collector follows at each cycle, over up to
// MaxTracked notes, do not grow with those strings (BENCHMARKS.md, "The
// API's own load generator, its read model and its seen-set copy
// packed"). Events stay in the order they were read: the first request
// and the first decision are the first events of their kinds.
type note struct {
	events   []event
	receipts map[string]bool // receipt ids placed: a receipt sent again shows once
}

// event is one record of a note: its kind (an sdk.Event* name), its time
// (a request's record time; the time inside the others' values), and its
// value, decodable by schemas.Decode as the record of its kind.
type event struct {
	kind  string
	at    int64
	value []byte
}

// waiter collects the dedupe decisions about one call's records and, when
// the tracker waits for the route stage too, the route decisions about the
// accepted ones.
type waiter struct {
	want   map[string]bool // notification ids
	got    map[string]schemas.Decision
	routed map[string]schemas.Decision
	// withRoute: wait for the route decisions too (set before the write).
	withRoute bool
	// explain: the answers are dry runs, never cached as decisions.
	explain bool
	closed  bool
	done    chan struct{}
}

// complete reports whether every decision awaited is in: a dedupe decision
// for each record and, with withRoute, a route decision for each accepted
// one (a duplicate or a replay never reaches the route stage).
func (w *waiter) complete() bool {
	if len(w.got) != len(w.want) {
		return false
	}
	if w.withRoute {
		for id, d := range w.got {
			if _, ok := w.routed[id]; d.Outcome == schemas.DecisionAccepted && !ok {
				return false
			}
		}
	}
	return true
}

func newTracker(maxNotes int, quotaWindow time.Duration) *tracker {
	return &tracker{max: maxNotes, quotaW: quotaWindow.Milliseconds(), notes: map[noteKey]*note{},
		waiters: map[string]*waiter{}, accepted: map[string]int64{}}
}

// expect registers a waiter for the decisions about requestID's records
// (and the route decisions about the accepted ones, withRoute); call it
// before writing them. Cancel it with forget.
func (t *tracker) expect(requestID string, ids []string, withRoute bool) *waiter {
	w := &waiter{want: map[string]bool{}, got: map[string]schemas.Decision{}, routed: map[string]schemas.Decision{},
		withRoute: withRoute, done: make(chan struct{})}
	for _, id := range ids {
		w.want[id] = true
	}
	t.mu.Lock()
	t.waiters[requestID] = w
	t.mu.Unlock()
	return w
}

func (t *tracker) forget(requestID string) {
	t.mu.Lock()
	delete(t.waiters, requestID)
	t.mu.Unlock()
}

// wait blocks until every decision arrived, the deadline, or ctx ends, and
// returns the dedupe decisions so far by notification id (the route
// decisions are in routedOf) and whether every decision it waited for
// arrived.
func (t *tracker) wait(ctx context.Context, requestID string, w *waiter, d time.Duration) (got map[string]schemas.Decision, complete bool) {
	if d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-w.done:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.waiters, requestID)
	return maps.Clone(w.got), w.closed
}

// routedOf returns the route decisions w received, by notification id,
// when it waited for them (nil otherwise: what arrived by chance is not
// reported, so an answer does not depend on timing).
func (t *tracker) routedOf(w *waiter) map[string]schemas.Decision {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !w.withRoute {
		return nil
	}
	return maps.Clone(w.routed)
}

// noteFor returns k's note, made (and the oldest evicted past t.max) when
// there is none. k's strings may point into a record being read: a new
// note's key is a copy.
func (t *tracker) noteFor(k noteKey) *note {
	n := t.notes[k]
	if n == nil {
		k = noteKey{strings.Clone(k.tenant), strings.Clone(k.id)}
		n = &note{events: make([]event, 0, 2)} // a request and its decision, at least
		t.notes[k] = n
		t.order = append(t.order, k)
		for len(t.notes) > t.max && len(t.order) > 0 {
			delete(t.notes, t.order[0])
			t.order = t.order[1:]
		}
		if cap(t.order) > 4*t.max && len(t.order) < t.max {
			t.order = slices.Clone(t.order)
		}
	}
	return n
}

// The add functions below place one record value of a read-model topic,
// read at time at, into its notification's note. They read value in place
// (schemas.Decoder.DecodeShared, with the tracker's decoder: call them
// from one goroutine, the consumer's) and keep a copy of it; a value that
// does not decode as its topic's record is returned as an error and
// placed nowhere.

// addRequest places a request.
// routeDecision returns the route stage's decision about request req of
// tenant's notification id (the notification's, not a channel's), if the
// tracker holds it.
func (t *tracker) routeDecision(tenant, id, req string) (schemas.Decision, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.notes[noteKey{tenant, id}]
	if n == nil {
		return schemas.Decision{}, false
	}
	for _, e := range n.events {
		if e.kind != sdk.EventDecision {
			continue
		}
		var d schemas.Decision
		if schemas.Decode(e.value, &d) == nil && d.Stage == "route" && d.Channel == "" && d.RequestID == req {
			return d, true
		}
	}
	return schemas.Decision{}, false
}

// placeOwn places a request this instance wrote itself (the bounded cache
// of its own sends, when the read model does not run: see history.go).
func (t *tracker) placeOwn(tenant, id string, at int64, value []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.place(noteKey{tenant, id}, sdk.EventRequested, at, value)
}

func (t *tracker) addRequest(value []byte, at int64) error {
	r := &t.scratch.req
	*r = schemas.Request{}
	if err := t.dec.DecodeShared(value, r); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.place(noteKey{r.Tenant, r.NotificationID}, sdk.EventRequested, at, value)
	return nil
}

// addAttempt places a sink's call to a provider. Attempts are keyed by
// delivery id on their topic but carry the notification id and the
// tenant; one without a tenant is not placed.
func (t *tracker) addAttempt(value []byte) error {
	a := &t.scratch.attempt
	*a = schemas.Attempt{}
	if err := t.dec.DecodeShared(value, a); err != nil {
		return err
	}
	if a.Tenant == "" || a.NotificationID == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.place(noteKey{a.Tenant, a.NotificationID}, sdk.EventAttempt, a.At, value)
	return nil
}

// addOutcome places a delivery's final state.
func (t *tracker) addOutcome(value []byte) error {
	o := &t.scratch.outcome
	*o = schemas.Outcome{}
	if err := t.dec.DecodeShared(value, o); err != nil {
		return err
	}
	if o.Tenant == "" || o.NotificationID == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.place(noteKey{o.Tenant, o.NotificationID}, sdk.EventOutcome, o.At, value)
	return nil
}

// addReceipt places what a device reported, once per receipt id.
func (t *tracker) addReceipt(value []byte) error {
	rc := &t.scratch.receipt
	*rc = schemas.Receipt{}
	if err := t.dec.DecodeShared(value, rc); err != nil {
		return err
	}
	if rc.Tenant == "" || rc.NotificationID == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.noteFor(noteKey{rc.Tenant, rc.NotificationID})
	if n.receipts[rc.ReceiptID] {
		return nil
	}
	if n.receipts == nil {
		n.receipts = map[string]bool{}
	}
	n.receipts[strings.Clone(rc.ReceiptID)] = true
	n.add(sdk.EventReceipt, rc.At, value)
	return nil
}

// addDecision places a decision, and counts it against the quota when
// countQuota (decisions below the live consumer's start, which counts the
// rest: see addLive).
func (t *tracker) addDecision(value []byte, countQuota bool) error {
	d := &t.scratch.decision
	*d = schemas.Decision{}
	if err := t.dec.DecodeShared(value, d); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if d.Tenant != "" {
		t.place(noteKey{d.Tenant, d.NotificationID}, sdk.EventDecision, d.At, value)
	}
	if countQuota {
		t.countAccepted(d)
	}
	return nil
}

// place appends a copy of value to k's note as an event of kind at time
// at. Call it with t.mu held.
func (t *tracker) place(k noteKey, kind string, at int64, value []byte) {
	t.noteFor(k).add(kind, at, value)
}

// add appends a copy of value as an event of kind at time at.
func (n *note) add(kind string, at int64, value []byte) {
	n.events = append(n.events, event{kind: kind, at: at, value: bytes.Clone(value)})
}

// countAccepted counts an accepted dedupe decision in its quota window.
// d's strings may point into a record being read: a tenant counted for
// the first time in a window is counted under a copy of its name. Call it
// with t.mu held.
func (t *tracker) countAccepted(d *schemas.Decision) {
	if d.Stage != "dedupe" || d.Outcome != schemas.DecisionAccepted || t.quotaW == 0 {
		return
	}
	switch w := d.At / t.quotaW; {
	case w > t.window:
		t.window = w
		clear(t.accepted)
	case w < t.window:
		return
	}
	if _, ok := t.accepted[d.Tenant]; ok {
		t.accepted[d.Tenant]++
	} else {
		t.accepted[strings.Clone(d.Tenant)] = 1
	}
}

// addLive hands a decision the live consumer read to the call waiting for
// it, if any (answer: read from this instance's partition of
// herald.replies), or counts it against the quota (count: read from
// herald.decisions, which the live consumer reads only with a quota). Only
// the live consumer (consumeLive) calls it: the read model's consumer
// starts Lookback ago and reaches new decisions only once it has read the
// history before them.
//
// d was read in place from value (its strings may point into the record
// being read); a decision handed to a waiter is decoded again from value,
// into strings of its own.
func (t *tracker) addLive(d *schemas.Decision, value []byte, count, answer bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if count {
		t.countAccepted(d)
	}
	if !answer {
		return
	}
	w := t.waiters[d.RequestID]
	if t.ownOnly && d.Tenant != "" && (d.Stage == "route" || w != nil && !w.explain) {
		// The cache of this instance's own sends keeps the answers too,
		// the route stage's even when nobody waits for it any more (a
		// replay answers its deliveries, replays.go). Only a dedupe
		// decision answers an explain, which is never kept.
		t.place(noteKey{d.Tenant, d.NotificationID}, sdk.EventDecision, d.At, value)
	}
	if w == nil || !w.want[d.NotificationID] {
		return
	}
	owned := func() (schemas.Decision, bool) {
		var o schemas.Decision
		return o, schemas.Decode(value, &o) == nil // decoded once already: cannot fail
	}
	switch {
	case d.Stage == "dedupe":
		if _, dup := w.got[d.NotificationID]; !dup {
			if o, ok := owned(); ok {
				w.got[o.NotificationID] = o
			}
		}
	case d.Stage == "route" && d.Channel == "":
		if o, ok := owned(); ok {
			w.routed[o.NotificationID] = o
		}
	}
	if !w.closed && w.complete() {
		w.closed = true
		close(w.done)
	}
}

// acceptedIn returns the tenant's accepted count in the quota window that
// holds now (ms), and when that window ends.
func (t *tracker) acceptedIn(tenant string, now int64) (int64, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := now / t.quotaW
	end := (w + 1) * t.quotaW
	if w != t.window {
		return 0, end
	}
	return t.accepted[tenant], end
}

// record returns the read model of one notification of a tenant: its
// first request (or, without one, its first decision) and its timeline.
func (t *tracker) record(tenant, id string) (sdk.NotificationRecord, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.notes[noteKey{tenant, id}]
	if n == nil {
		return sdk.NotificationRecord{}, false
	}
	rec := sdk.NotificationRecord{ID: id, Status: sdk.StatusPending, Timeline: make([]sdk.TimelineEvent, 0, len(n.events))}
	var req *schemas.Request
	var first *schemas.Decision // first decision of any request
	var routes []*schemas.Decision
	for _, e := range n.events {
		ev, r, d := decodeEvent(e)
		rec.Timeline = append(rec.Timeline, ev)
		if req == nil {
			req = r
		}
		if first == nil {
			first = d
		}
		if d != nil && d.Stage == "route" && d.Channel == "" {
			routes = append(routes, d)
		}
	}
	switch {
	case req != nil:
		r := req
		rec.Type, rec.Recipient, rec.Title, rec.Body = r.Type, r.Recipient, r.Title, r.Body
		rec.Payload, rec.Locale, rec.Channels = r.Payload, r.Locale, r.Channels
		rec.DedupeKey, rec.IdempotencyKey, rec.IDSource = r.DedupeKey, r.IdempotencyKey, r.IDSource
		rec.RequestID, rec.Producer, rec.Source, rec.CreatedAt = r.RequestID, r.Producer, r.Source, r.CreatedAt
	case first != nil:
		d := first
		rec.Type, rec.Recipient, rec.RequestID, rec.Producer = d.Type, d.Recipient, d.RequestID, d.Producer
		rec.DedupeKey, rec.IdempotencyKey, rec.IDSource, rec.Source = d.DedupeKey, d.IdempotencyKey, "unknown", "unknown"
	default:
		return sdk.NotificationRecord{}, false // attempts, outcomes or receipts alone
	}
	sortTimeline(rec.Timeline)
	var route *schemas.Decision
	for _, d := range routes {
		if d.RequestID == rec.RequestID {
			route = d
			break
		}
	}
	rec.Status = audit.NotificationStatus(audit.DedupeOutcome(rec.Timeline, rec.RequestID), route, audit.FinalsOf(rec.Timeline))
	return rec, true
}

// sortTimeline orders events by time, and the events of one millisecond as
// they happen (kindOrder).
func sortTimeline(tl []sdk.TimelineEvent) {
	slices.SortStableFunc(tl, func(a, b sdk.TimelineEvent) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return cmp.Compare(kindOrder[a.Kind], kindOrder[b.Kind])
	})
}

// decodeEvent returns e as a timeline event and, for a request or a
// decision, the record it was read from. e's value decoded when it was
// placed, so it decodes again: an error cannot happen.
func decodeEvent(e event) (sdk.TimelineEvent, *schemas.Request, *schemas.Decision) {
	ev := sdk.TimelineEvent{At: time.UnixMilli(e.at).UTC(), Kind: e.kind}
	switch e.kind {
	case sdk.EventRequested:
		r := new(schemas.Request)
		_ = schemas.Decode(e.value, r)
		ev.RequestID, ev.Producer = r.RequestID, r.Producer
		return ev, r, nil
	case sdk.EventDecision:
		d := new(schemas.Decision)
		_ = schemas.Decode(e.value, d)
		ev.RequestID, ev.Stage, ev.Outcome, ev.Detail = d.RequestID, d.Stage, d.Outcome, d.Detail
		ev.OriginalRequestID, ev.Producer = d.OriginalRequestID, d.Producer
		return ev, nil, d
	case sdk.EventAttempt:
		var a schemas.Attempt
		_ = schemas.Decode(e.value, &a)
		ev.DeliveryID, ev.Channel, ev.DeviceID, ev.Attempt = a.DeliveryID, a.Channel, a.DeviceID, a.Attempt
		ev.Result, ev.Classification, ev.Reason = a.Result, a.Classification, a.ProviderReason
	case sdk.EventOutcome:
		var o schemas.Outcome
		_ = schemas.Decode(e.value, &o)
		ev.DeliveryID, ev.Channel, ev.DeviceID = o.DeliveryID, o.Channel, o.DeviceID
		ev.Status, ev.Attempts, ev.Reason = o.Status, o.Attempts, o.Reason
	case sdk.EventReceipt:
		var rc schemas.Receipt
		_ = schemas.Decode(e.value, &rc)
		ev.DeliveryID, ev.Channel, ev.DeviceID, ev.Receipt, ev.ReceiptID = rc.DeliveryID, rc.Channel, rc.DeviceID, rc.Kind, rc.ReceiptID
	}
	return ev, nil, nil
}

// kindOrder orders the events of one millisecond as they happen: a request,
// its decisions, the attempts of its deliveries, their outcomes.
var kindOrder = map[string]int{sdk.EventRequested: 0, sdk.EventDecision: 1, sdk.EventAttempt: 2, sdk.EventOutcome: 3, sdk.EventReceipt: 4}

// trackerTopics names the topics the read model consumes.
type trackerTopics struct{ requests, decisions, attempts, outcomes, receipts string }

// consumeLive reads this instance's partition of herald.replies (and, with
// a quota, herald.decisions) from where cl was positioned (the end offsets
// listed when the server started, see Server.liveDecisionsClient) until
// ctx ends, and hands each reply to its waiter. It never reads history, so
// a call waiting for a decision is answered as soon as the decision is
// committed, however much the read model still has to catch up.
func (t *tracker) consumeLive(ctx context.Context, cl *kgo.Client, repliesT string, lag *metrics.Lag, log *slog.Logger) {
	var dec schemas.Decoder
	d := new(schemas.Decision) // one for every record: see tracker.scratch
	pollEach(ctx, cl, lag, log, "live decisions", func(r *kgo.Record) {
		*d = schemas.Decision{}
		if err := dec.DecodeShared(r.Value, d); err != nil {
			log.Debug("live decisions: skip undecodable decision", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			return
		}
		replied := r.Topic == repliesT
		t.addLive(d, r.Value, !replied, replied)
	})
}

// pollEach polls cl until ctx ends or cl closes, logs fetch errors under
// what, sets each partition's lag, and hands every record to fn.
func pollEach(ctx context.Context, cl *kgo.Client, lag *metrics.Lag, log *slog.Logger, what string, fn func(*kgo.Record)) {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				log.Warn(what+" fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		lag.Observe(fs)
		fs.EachRecord(fn)
	}
}

// consume reads requests, decisions, attempts and outcomes into the read
// model until ctx ends.
func (t *tracker) consume(ctx context.Context, cl *kgo.Client, tp trackerTopics, lag *metrics.Lag, log *slog.Logger) {
	pollEach(ctx, cl, lag, log, "read model", func(r *kgo.Record) {
		if reply.IsExplain(r) {
			return // a dry run the stages answered, not a request
		}
		var err error
		switch r.Topic {
		case tp.requests:
			err = t.addRequest(r.Value, r.Timestamp.UnixMilli())
		case tp.decisions:
			err = t.addDecision(r.Value, r.Offset < t.liveFrom[r.Partition])
		case tp.attempts:
			err = t.addAttempt(r.Value)
		case tp.outcomes:
			err = t.addOutcome(r.Value)
		case tp.receipts:
			err = t.addReceipt(r.Value)
		}
		if err != nil {
			log.Debug("read model: skip an undecodable record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		}
	})
}
