package webhook

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// send.completed: one event per notification once every delivery of it
// is final.
//
// The route stage's notification-level decision on herald.decisions
// (keyed by notification id) lists the notification's deliveries; each
// delivery's final state is an Outcome on herald.outcomes (keyed by
// delivery id, so spread over partitions). Two stateless stages bring
// both to herald.completions keyed by the notification's occurrence id
// (schemas.Occurrence: the notification id before occurrences existed), so a
// notification's records meet in one partition: the decisions forwarder
// (herald.decisions in) and the fan-out (herald.outcomes in, beside its
// webhook deliveries). Both forward only the records of tenants with an
// enabled endpoint subscribed to send.completed. The completion stage
// (herald.completions in) keeps, per notification, which deliveries are
// still open in the compacted changelog herald.completionstate
// (co-partitioned); the transaction that reads the last final state
// writes the notification's webhook deliveries and the state's tombstone
// with its input offsets, so a crash before its commit writes them again
// from the restored state and one after it never does: exactly one
// send.completed per notification and endpoint on
// herald.deliveries.webhook. The event's id is
// identity.WebhookEventID(occurrence id, "send.completed") (the
// occurrence id derives from the notification id and its acceptance): its
// webhook-id is "msg_" and that, the same on every retry; a dedupe key
// accepted again after its window is a new occurrence, sent again, with
// an event of its own.
//
// Which decisions count: the route stage's with no channel. routed,
// deferred and no_target list deliveries (a deferred push is final once
// its sink ends it; the release at the end of quiet hours adds nothing).
// rate_limited, opted_out, digested (the digest is a notification of its
// own), no_target without a fallback and rejected list none: the event
// follows the decision at once, status skipped. A per-channel opted_out
// decision adds the channel to the summary as skipped.
//
// Outcomes can be read before the decision (two forwarders): they are
// kept until it comes. An entry open longer than CompletionOptions.MaxOpen
// (7 days by default: the outcome topic's retention) is dropped without an
// event, logged: a decision or an outcome that was never forwarded (an
// endpoint registered while the notification was in flight, a forwarder
// started at the end of its input).

// Completion statuses (CompletionData.Status).
const (
	// CompletedDelivered: every delivery delivered.
	CompletedDelivered = "delivered"
	// CompletedPartial: some delivered, some not.
	CompletedPartial = "partially_delivered"
	// CompletedFailed: deliveries, none delivered.
	CompletedFailed = "failed"
	// CompletedSkipped: the route stage made no delivery.
	CompletedSkipped = "skipped"
)

// CompletionEvent is the body of a send.completed webhook.
type CompletionEvent struct {
	Type      string         `json:"type"`
	Timestamp string         `json:"timestamp"`
	Data      CompletionData `json:"data"`
}

// CompletionData is a send.completed event's data.
type CompletionData struct {
	EventID        string `json:"eventId"`
	NotificationID string `json:"notificationId"`
	// OccurrenceID names this acceptance of the notification (a dedupe key
	// accepted again after its window is a new occurrence, with an event
	// of its own); empty for one accepted before occurrences existed.
	OccurrenceID     string `json:"occurrenceId,omitempty"`
	NotificationType string `json:"notificationType"`
	Recipient        string `json:"recipient"`
	Status           string `json:"status"`
	// Decision is the route stage's (routed, deferred, no_target, ...),
	// Detail its words.
	Decision string `json:"decision"`
	Detail   string `json:"detail,omitempty"`
	// Channels: per channel, how many deliveries ended in each status
	// (skipped: the recipient opted out of the channel).
	Channels   map[string]map[string]int `json:"channels"`
	Deliveries []CompletedDelivery       `json:"deliveries"`
	// CompletedAt is the time of the last final state (ms).
	CompletedAt int64 `json:"completedAt"`
}

// CompletedDelivery is one delivery in a send.completed event.
type CompletedDelivery struct {
	DeliveryID string `json:"deliveryId"`
	Channel    string `json:"channel"`
	DeviceID   string `json:"deviceId"`
	Status     string `json:"status"`
	Reason     string `json:"reason,omitempty"`
	Attempts   int    `json:"attempts"`
	At         int64  `json:"at"`
}

// ApplyDecision adds a route decision to a notification's entry (nil: a
// new one), reporting whether it concerns the event at all (only the
// route stage's decisions do, not a release of deferred pushes).
func ApplyDecision(e *schemas.Completion, d *schemas.Decision, at int64) (*schemas.Completion, bool) {
	if d.Stage != "route" || d.NotificationID == "" || strings.HasPrefix(d.DecisionID, "route/release/") {
		return e, false
	}
	e = entryFor(e, d.NotificationID, d.OccurrenceID, d.Tenant, d.Type, d.Recipient, at)
	if d.Channel != "" {
		if d.Outcome == schemas.DecisionOptedOut && !slices.Contains(e.Skipped, d.Channel) {
			e.Skipped = append(e.Skipped, d.Channel)
		}
		return e, true
	}
	if e.Decision != "" {
		return e, true // decided already (a repeat): the first decision holds
	}
	e.Decision, e.Detail, e.DecidedAt = d.Outcome, d.Detail, d.At
	for _, dd := range d.Deliveries {
		if dd.State == schemas.DeliveryFallback {
			continue // sent only if its fallback step fires (processors/fallback): not waited for
		}
		i := slices.IndexFunc(e.Deliveries, func(c schemas.CompletionDelivery) bool { return c.DeliveryID == dd.DeliveryID })
		if i < 0 {
			e.Deliveries = append(e.Deliveries, schemas.CompletionDelivery{DeliveryID: dd.DeliveryID, Channel: dd.Channel, DeviceID: dd.DeviceID})
			i = len(e.Deliveries) - 1
		}
		e.Deliveries[i].Planned = true
	}
	return e, true
}

// ApplyOutcome adds a delivery's final state to a notification's entry
// (nil: a new one), reporting whether it concerns the event (a webhook
// delivery's own outcome does not). A second outcome of one delivery
// changes nothing.
func ApplyOutcome(e *schemas.Completion, o *schemas.Outcome, at int64) (*schemas.Completion, bool) {
	if o.Channel == Channel || o.NotificationID == "" {
		return e, false
	}
	e = entryFor(e, o.NotificationID, o.OccurrenceID, o.Tenant, o.Type, o.Recipient, at)
	i := slices.IndexFunc(e.Deliveries, func(c schemas.CompletionDelivery) bool { return c.DeliveryID == o.DeliveryID })
	if i < 0 {
		e.Deliveries = append(e.Deliveries, schemas.CompletionDelivery{DeliveryID: o.DeliveryID, Channel: o.Channel, DeviceID: o.DeviceID})
		i = len(e.Deliveries) - 1
	}
	if d := &e.Deliveries[i]; d.Status == "" {
		d.Status, d.Reason, d.Attempts, d.At = o.Status, o.Reason, o.Attempts, o.At
	}
	return e, true
}

func entryFor(e *schemas.Completion, nid, occurrence, tenant, typ, recipient string, at int64) *schemas.Completion {
	if e != nil {
		return e
	}
	return &schemas.Completion{NotificationID: nid, OccurrenceID: occurrence, Tenant: tenant, Type: typ, Recipient: recipient, FirstAt: at}
}

// Complete reports whether a notification's entry is final: its decision
// read and every delivery it lists ended.
func Complete(e *schemas.Completion) bool {
	if e == nil || e.Decision == "" {
		return false
	}
	for _, d := range e.Deliveries {
		if d.Planned && d.Status == "" {
			return false
		}
	}
	return true
}

// Completed builds the send.completed data of a complete entry; it
// depends only on the entry, so the same entry always gives the same
// bytes.
func Completed(e *schemas.Completion) CompletionData {
	data := CompletionData{
		EventID: identity.WebhookEventID(schemas.Occurrence(e.NotificationID, e.OccurrenceID), schemas.EventSendCompleted), NotificationID: e.NotificationID,
		OccurrenceID:     e.OccurrenceID,
		NotificationType: e.Type, Recipient: e.Recipient, Decision: e.Decision, Detail: e.Detail,
		Channels: map[string]map[string]int{}, Deliveries: []CompletedDelivery{}, CompletedAt: e.DecidedAt,
	}
	delivered := 0
	for _, d := range e.Deliveries {
		if d.Status == "" {
			continue // unplanned and open: cannot be (an outcome made it), kept out of the summary
		}
		data.Deliveries = append(data.Deliveries, CompletedDelivery{DeliveryID: d.DeliveryID, Channel: d.Channel, DeviceID: d.DeviceID,
			Status: d.Status, Reason: d.Reason, Attempts: d.Attempts, At: d.At})
		count(data.Channels, d.Channel, d.Status)
		data.CompletedAt = max(data.CompletedAt, d.At)
		if d.Status == schemas.OutcomeDelivered {
			delivered++
		}
	}
	for _, ch := range e.Skipped {
		count(data.Channels, ch, "skipped")
	}
	slices.SortFunc(data.Deliveries, func(a, b CompletedDelivery) int { return strings.Compare(a.DeliveryID, b.DeliveryID) })
	if n := len(data.Deliveries); n == 0 {
		data.Status = CompletedSkipped
	} else if delivered == n {
		data.Status = CompletedDelivered
	} else if delivered > 0 {
		data.Status = CompletedPartial
	} else {
		data.Status = CompletedFailed
	}
	return data
}

func count(m map[string]map[string]int, ch, status string) {
	if m[ch] == nil {
		m[ch] = map[string]int{}
	}
	m[ch][status]++
}

// CompletionCommands are the webhook deliveries of a complete entry: one
// per enabled endpoint of its tenant subscribed to send.completed and
// created at or before the completion. Their delivery ids
// (identity.DeliveryID of the event id and the endpoint id) and bodies
// depend only on the entry and the endpoint.
func CompletionCommands(e *schemas.Completion, endpoints []schemas.Webhook) []*schemas.DeliveryCommand {
	const ev = schemas.EventSendCompleted
	data := Completed(e)
	var out []*schemas.DeliveryCommand
	var body []byte
	for _, ep := range endpoints {
		if !ep.Enabled || ep.Tenant != e.Tenant || data.CompletedAt < ep.CreatedAt || !slices.Contains(ep.Events, ev) {
			continue
		}
		if body == nil {
			body, _ = json.Marshal(CompletionEvent{Type: ev, // maps, strings and numbers: cannot fail
				Timestamp: time.UnixMilli(data.CompletedAt).UTC().Format("2006-01-02T15:04:05.000Z"), Data: data})
		}
		out = append(out, &schemas.DeliveryCommand{
			DeliveryID: identity.DeliveryID(data.EventID, ep.ID), NotificationID: e.NotificationID, Tenant: e.Tenant,
			Type: e.Type, Recipient: e.Recipient, DeviceID: ep.ID, Channel: Channel, CollapseID: "msg_" + data.EventID,
			Title: ev, Payload: body, CreatedAt: data.CompletedAt,
		})
	}
	return out
}

// forwardRecord is a record of herald.completions: v keyed by its
// occurrence (Occurrence).
func forwardRecord(topic, key string, v schemas.Record) (*kgo.Record, error) {
	b, err := schemas.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("webhook: forward %s: %w", v.SchemaName(), err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: b,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(v.SchemaName())}}}, nil
}

// ForwardOptions configure the decisions forwarder.
type ForwardOptions struct {
	// The runtime's settings; Group is "herald-webhook-decisions" by
	// default.
	stage.Instance
	Catalog *topics.Catalog
	Table   *Table
}

// NewForwarder builds the decisions forwarder: herald.decisions in, the
// route decisions of tenants with a send.completed endpoint out to
// herald.completions. Run it once its Table is ready.
func NewForwarder(o ForwardOptions) (*stage.Runner, error) {
	cfg, log, err := stageConfig(o.Instance, o.Catalog, o.Table, "webhook-decisions", topics.Decisions)
	if err != nil {
		return nil, err
	}
	topic := o.Catalog.Name(topics.Completions)
	cfg.Outputs = []string{topic}
	cfg.NewTask = func(int32) stage.Task { return &forwardTask{table: o.Table, topic: topic, log: log} }
	return stage.New(cfg)
}

// forwardTask forwards one herald.decisions partition: stateless.
type forwardTask struct {
	stage.Stateless
	table *Table
	topic string
	log   *slog.Logger
}

// Process forwards a route decision; an undecodable record is skipped
// (logged).
func (f *forwardTask) Process(r *kgo.Record, out *stage.Out) error {
	if h := schemaHeader(r); h != "" && h != schemas.DecisionV1 && h != schemas.DecisionV2 {
		return nil
	}
	var d schemas.Decision
	if err := schemas.Decode(r.Value, &d); err != nil {
		f.log.Warn("skip an undecodable decision", "partition", r.Partition, "offset", r.Offset, "err", err)
		return nil
	}
	if _, ok := ApplyDecision(nil, &d, 0); !ok || !f.table.Subscribed(d.Tenant, schemas.EventSendCompleted) {
		return nil
	}
	rec, err := forwardRecord(f.topic, schemas.Occurrence(d.NotificationID, d.OccurrenceID), &d)
	if err != nil {
		return err
	}
	out.Emit(rec)
	return nil
}

func schemaHeader(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == schemas.HeaderSchema {
			return string(h.Value)
		}
	}
	return ""
}

// CompletionOptions configure the completion stage.
type CompletionOptions struct {
	// The runtime's settings; Group is "herald-webhook-completion" by
	// default.
	stage.Instance
	Catalog *topics.Catalog
	Table   *Table
	// MaxOpen is how long an entry may stay open after its first record
	// (7 days by default).
	MaxOpen time.Duration
	// Now is the clock of the expiry (time.Now by default).
	Now func() time.Time
}

// NewCompletion builds the completion stage: herald.completions in,
// send.completed webhook deliveries out on herald.deliveries.webhook,
// state in herald.completionstate. Run it once its Table is ready.
func NewCompletion(o CompletionOptions) (*stage.Runner, error) {
	cfg, _, err := stageConfig(o.Instance, o.Catalog, o.Table, "webhook-completion", topics.Completions)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cfg.Changelogs = []string{o.Catalog.Name(topics.CompletionState)}
	cfg.Outputs = []string{o.Catalog.Name(topics.Deliveries(Channel))}
	cfg.NewTask = func(p int32) stage.Task { return NewCompletionTask(o, p) }
	return stage.New(cfg)
}

// NewCompletionTask returns the empty task of one herald.completions
// partition (NewCompletion's, with its defaults applied; tests).
func NewCompletionTask(o CompletionOptions, partition int32) *CompletionTask {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxOpen <= 0 {
		o.MaxOpen = 7 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &CompletionTask{table: o.Table, deliveries: o.Catalog.Name(topics.Deliveries(Channel)), state: o.Catalog.Name(topics.CompletionState),
		partition: partition, log: o.Logger.With("stage", "webhook-completion"), maxOpen: o.MaxOpen.Milliseconds(), now: o.Now,
		entries: map[string]*schemas.Completion{}, pending: map[string]*schemas.Completion{}}
}

// CompletionTask is the completion stage's state for one
// herald.completions partition: the committed entries and the open
// transaction's changes.
type CompletionTask struct {
	table             *Table
	deliveries, state string
	partition         int32
	log               *slog.Logger
	maxOpen           int64
	now               func() time.Time
	lastSweep         time.Time

	entries map[string]*schemas.Completion
	pending map[string]*schemas.Completion // nil: deleted in this transaction
}

var _ stage.Task = (*CompletionTask)(nil)

// Len is the number of committed open entries.
func (t *CompletionTask) Len() int { return len(t.entries) }

// Restore implements stage.Task.
func (t *CompletionTask) Restore(r *kgo.Record) error {
	if r.Value == nil {
		delete(t.entries, string(r.Key))
		return nil
	}
	var e schemas.Completion
	if err := schemas.Decode(r.Value, &e); err != nil {
		return fmt.Errorf("webhook: restore completion %q: %w", r.Key, err)
	}
	t.entries[string(r.Key)] = &e
	return nil
}

func (t *CompletionTask) lookup(key string) *schemas.Completion {
	if e, ok := t.pending[key]; ok {
		return e
	}
	return t.entries[key]
}

// Process implements stage.Task: one decision or outcome of a
// notification; once the notification is complete, its webhook
// deliveries and the entry's tombstone, else the entry.
func (t *CompletionTask) Process(r *kgo.Record, out *stage.Out) error {
	at := r.Timestamp.UnixMilli()
	key := string(r.Key)
	prev := t.lookup(key)
	var e *schemas.Completion
	if prev != nil {
		c := *prev
		c.Deliveries = slices.Clone(prev.Deliveries)
		c.Skipped = slices.Clone(prev.Skipped)
		e = &c
	}
	var ok bool
	switch schemaHeader(r) {
	case schemas.OutcomeV1:
		var o schemas.Outcome
		if err := schemas.Decode(r.Value, &o); err != nil {
			t.log.Warn("skip an undecodable outcome", "partition", r.Partition, "offset", r.Offset, "err", err)
			return nil
		}
		e, ok = ApplyOutcome(e, &o, at)
	case schemas.DecisionV1, schemas.DecisionV2:
		var d schemas.Decision
		if err := schemas.Decode(r.Value, &d); err != nil {
			t.log.Warn("skip an undecodable decision", "partition", r.Partition, "offset", r.Offset, "err", err)
			return nil
		}
		e, ok = ApplyDecision(e, &d, at)
	default:
		t.log.Warn("skip a record of another schema", "partition", r.Partition, "offset", r.Offset, "schema", schemaHeader(r))
		return nil
	}
	if !ok || schemas.Occurrence(e.NotificationID, e.OccurrenceID) != key {
		return nil
	}
	if !Complete(e) {
		return t.put(key, e, at, out)
	}
	for _, cmd := range CompletionCommands(e, t.table.Tenant(e.Tenant)) {
		b, err := schemas.Encode(cmd)
		if err != nil {
			return fmt.Errorf("webhook: encode completion: %w", err)
		}
		out.Emit(&kgo.Record{Topic: t.deliveries, Key: []byte(cmd.DeliveryID), Value: b, Timestamp: time.UnixMilli(at),
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(cmd.SchemaName())}}})
	}
	return t.put(key, nil, at, out)
}

// put writes the entry (nil: its tombstone) to the changelog, pending.
func (t *CompletionTask) put(key string, e *schemas.Completion, at int64, out *stage.Out) error {
	if e == nil && t.lookup(key) == nil {
		t.pending[key] = nil // never written: nothing to delete
		return nil
	}
	r := &kgo.Record{Topic: t.state, Key: []byte(key), Partition: t.partition, Timestamp: time.UnixMilli(at)}
	if e != nil {
		b, err := schemas.Encode(e)
		if err != nil {
			return fmt.Errorf("webhook: encode completion state: %w", err)
		}
		r.Value = b
		r.Headers = []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(e.SchemaName())}}
	}
	out.Emit(r)
	t.pending[key] = e
	return nil
}

// Tick implements stage.Task: once a minute, entries open longer than
// MaxOpen are dropped (tombstoned, logged), without an event.
func (t *CompletionTask) Tick(out *stage.Out) {
	now := t.now()
	if now.Sub(t.lastSweep) < time.Minute {
		return
	}
	t.lastSweep = now
	cut := now.UnixMilli() - t.maxOpen
	dropped := 0
	for key, e := range t.entries {
		if _, changed := t.pending[key]; changed || e.FirstAt >= cut {
			continue
		}
		if err := t.put(key, nil, now.UnixMilli(), out); err == nil {
			dropped++
		}
	}
	if dropped > 0 {
		t.log.Warn("dropped notifications whose deliveries never all ended (no send.completed)", "partition", t.partition, "count", dropped)
	}
}

// Commit implements stage.Task.
func (t *CompletionTask) Commit() {
	for key, e := range t.pending {
		if e == nil {
			delete(t.entries, key)
		} else {
			t.entries[key] = e
		}
	}
	clear(t.pending)
}

// Abort implements stage.Task.
func (t *CompletionTask) Abort() { clear(t.pending) }
