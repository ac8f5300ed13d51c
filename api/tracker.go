package api

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

// tracker is the API's read model of herald.requests, herald.decisions,
// herald.attempts, herald.outcomes and herald.receipts, consumed
// read_committed from Lookback ago: each notification's first request and
// its timeline (GET /v1/notifications/{id}: requests, decisions, the sinks'
// attempts, the deliveries' outcomes and the devices' receipts) and the
// accepted count per tenant (quotas). It is eventually consistent: a request the API has just written appears once
// the consumer reads it back, and a freshly started API shows a
// notification only once the consumer has read up to it. The decisions
// that callers wait for (Prefer: wait, idempotency keys) come from a second
// consumer of herald.decisions that starts at its end (consumeLive), so
// they never wait for that catch-up.
type tracker struct {
	max    int
	quotaW int64 // quota window in ms; 0 without a quota

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
}

// noteKey scopes a notification id by tenant: canonical ids do not contain
// the tenant, so two tenants can send notifications with one id.
type noteKey struct{ tenant, id string }

type note struct {
	req      *schemas.Request
	first    *schemas.Decision // first decision of any request
	timeline []sdk.TimelineEvent
	receipts map[string]bool // receipt ids placed: a receipt sent again shows once
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
	closed    bool
	done      chan struct{}
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

func (t *tracker) noteFor(k noteKey) *note {
	n := t.notes[k]
	if n == nil {
		n = &note{}
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

func (t *tracker) addRequest(r schemas.Request, at int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.noteFor(noteKey{r.Tenant, r.NotificationID})
	if n.req == nil {
		r := r
		n.req = &r
	}
	n.timeline = append(n.timeline, sdk.TimelineEvent{At: at, Kind: sdk.EventRequested, RequestID: r.RequestID, Producer: r.Producer})
}

// addAttempt adds a sink's call to a provider to its notification's
// timeline. Attempts are keyed by delivery id on their topic but carry the
// notification id and the tenant; one without a tenant is not placed.
func (t *tracker) addAttempt(a schemas.Attempt) {
	if a.Tenant == "" || a.NotificationID == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.noteFor(noteKey{a.Tenant, a.NotificationID})
	n.timeline = append(n.timeline, sdk.TimelineEvent{At: a.At, Kind: sdk.EventAttempt, DeliveryID: a.DeliveryID,
		Channel: a.Channel, DeviceID: a.DeviceID, Attempt: a.Attempt, Result: a.Result,
		Classification: a.Classification, Reason: a.ProviderReason})
}

// addOutcome adds a delivery's final state to its notification's timeline.
func (t *tracker) addOutcome(o schemas.Outcome) {
	if o.Tenant == "" || o.NotificationID == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.noteFor(noteKey{o.Tenant, o.NotificationID})
	n.timeline = append(n.timeline, sdk.TimelineEvent{At: o.At, Kind: sdk.EventOutcome, DeliveryID: o.DeliveryID,
		Channel: o.Channel, DeviceID: o.DeviceID, Status: o.Status, Attempts: o.Attempts, Reason: o.Reason})
}

// addReceipt adds what a device reported to its notification's timeline,
// once per receipt id.
func (t *tracker) addReceipt(rc schemas.Receipt) {
	if rc.Tenant == "" || rc.NotificationID == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.noteFor(noteKey{rc.Tenant, rc.NotificationID})
	if n.receipts[rc.ReceiptID] {
		return
	}
	if n.receipts == nil {
		n.receipts = map[string]bool{}
	}
	n.receipts[rc.ReceiptID] = true
	n.timeline = append(n.timeline, sdk.TimelineEvent{At: rc.At, Kind: sdk.EventReceipt, DeliveryID: rc.DeliveryID,
		Channel: rc.Channel, DeviceID: rc.DeviceID, Receipt: rc.Kind, ReceiptID: rc.ReceiptID})
}

// addDecision adds a decision to the read model, and counts it against the
// quota when countQuota (decisions below the live consumer's start, which
// counts the rest: see addLive).
func (t *tracker) addDecision(d schemas.Decision, countQuota bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d.Tenant != "" {
		n := t.noteFor(noteKey{d.Tenant, d.NotificationID})
		if n.first == nil {
			d := d
			n.first = &d
		}
		n.timeline = append(n.timeline, sdk.TimelineEvent{At: d.At, Kind: sdk.EventDecision, RequestID: d.RequestID, Stage: d.Stage,
			Outcome: d.Outcome, Detail: d.Detail, OriginalRequestID: d.OriginalRequestID, Producer: d.Producer})
	}
	if countQuota {
		t.countAccepted(d)
	}
}

// countAccepted counts an accepted dedupe decision in its quota window.
// Call it with t.mu held.
func (t *tracker) countAccepted(d schemas.Decision) {
	if d.Stage == "dedupe" && d.Outcome == schemas.DecisionAccepted && t.quotaW > 0 {
		switch w := d.At / t.quotaW; {
		case w > t.window:
			t.window = w
			clear(t.accepted)
			t.accepted[d.Tenant]++
		case w == t.window:
			t.accepted[d.Tenant]++
		}
	}
}

// addLive counts a decision the live consumer read against the quota and
// hands it to the call waiting for it, if any, in that order: a call's
// answer implies its accepted notifications count. Only the live decisions
// consumer (consumeLive) calls it: the read model's consumer starts
// Lookback ago and reaches new decisions only once it has read the history
// before them.
func (t *tracker) addLive(d schemas.Decision) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.countAccepted(d)
	w := t.waiters[d.RequestID]
	if w == nil || !w.want[d.NotificationID] {
		return
	}
	switch {
	case d.Stage == "dedupe":
		if _, dup := w.got[d.NotificationID]; !dup {
			w.got[d.NotificationID] = d
		}
	case d.Stage == "route" && d.Channel == "":
		w.routed[d.NotificationID] = d
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

// record returns the read model of one notification of a tenant.
func (t *tracker) record(tenant, id string) (sdk.NotificationRecord, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.notes[noteKey{tenant, id}]
	if n == nil || (n.req == nil && n.first == nil) {
		return sdk.NotificationRecord{}, false
	}
	rec := sdk.NotificationRecord{ID: id, Status: sdk.StatusPending, Timeline: slices.Clone(n.timeline)}
	if r := n.req; r != nil {
		rec.Type, rec.Recipient, rec.Title, rec.Body = r.Type, r.Recipient, r.Title, r.Body
		rec.Payload, rec.Locale, rec.Channels = r.Payload, r.Locale, r.Channels
		rec.DedupeKey, rec.IdempotencyKey, rec.IDSource = r.DedupeKey, r.IdempotencyKey, r.IDSource
		rec.RequestID, rec.Producer, rec.Source, rec.CreatedAt = r.RequestID, r.Producer, r.Source, r.CreatedAt
	} else {
		d := n.first
		rec.Type, rec.Recipient, rec.RequestID, rec.Producer = d.Type, d.Recipient, d.RequestID, d.Producer
		rec.DedupeKey, rec.IdempotencyKey, rec.IDSource, rec.Source = d.DedupeKey, d.IdempotencyKey, "unknown", "unknown"
	}
	for _, e := range n.timeline {
		if e.Kind == sdk.EventDecision && e.RequestID == rec.RequestID {
			rec.Status = e.Outcome
			break
		}
	}
	slices.SortStableFunc(rec.Timeline, func(a, b sdk.TimelineEvent) int {
		if a.At != b.At {
			return cmp.Compare(a.At, b.At)
		}
		return cmp.Compare(kindOrder[a.Kind], kindOrder[b.Kind])
	})
	return rec, true
}

// kindOrder orders the events of one millisecond as they happen: a request,
// its decisions, the attempts of its deliveries, their outcomes.
var kindOrder = map[string]int{sdk.EventRequested: 0, sdk.EventDecision: 1, sdk.EventAttempt: 2, sdk.EventOutcome: 3, sdk.EventReceipt: 4}

// trackerTopics names the topics the read model consumes.
type trackerTopics struct{ requests, decisions, attempts, outcomes, receipts string }

// consumeLive reads herald.decisions from where cl was positioned (the end
// offsets listed when the server started, see Server.Start) until ctx ends,
// and hands each decision to its waiter. It never reads history, so a call
// waiting for a decision is answered as soon as the decision is committed,
// however much the read model still has to catch up.
func (t *tracker) consumeLive(ctx context.Context, cl *kgo.Client, lag *metrics.Lag, log *slog.Logger) {
	var dec schemas.Decoder
	pollEach(ctx, cl, lag, log, "live decisions", func(r *kgo.Record) {
		var d schemas.Decision
		if err := dec.Decode(r.Value, &d); err != nil {
			log.Debug("live decisions: skip undecodable decision", "partition", r.Partition, "offset", r.Offset, "err", err)
			return
		}
		t.addLive(d)
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
	var dec schemas.Decoder
	pollEach(ctx, cl, lag, log, "read model", func(r *kgo.Record) {
		switch r.Topic {
		case tp.requests:
			var req schemas.Request
			if err := dec.Decode(r.Value, &req); err != nil {
				log.Debug("read model: skip undecodable request", "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			t.addRequest(req, r.Timestamp.UnixMilli())
		case tp.decisions:
			var d schemas.Decision
			if err := dec.Decode(r.Value, &d); err != nil {
				log.Debug("read model: skip undecodable decision", "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			t.addDecision(d, r.Offset < t.liveFrom[r.Partition])
		case tp.attempts:
			var a schemas.Attempt
			if err := dec.Decode(r.Value, &a); err != nil {
				log.Debug("read model: skip undecodable attempt", "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			t.addAttempt(a)
		case tp.outcomes:
			var o schemas.Outcome
			if err := dec.Decode(r.Value, &o); err != nil {
				log.Debug("read model: skip undecodable outcome", "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			t.addOutcome(o)
		case tp.receipts:
			var rc schemas.Receipt
			if err := dec.Decode(r.Value, &rc); err != nil {
				log.Debug("read model: skip undecodable receipt", "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			t.addReceipt(rc)
		}
	})
}
