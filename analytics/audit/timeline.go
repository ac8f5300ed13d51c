// Package audit owns the auditors' view of the audit record: the timeline
// of one notification, one recipient or one dedupe key (every request,
// decision, attempt and outcome, with its reasons, and what the devices
// reported: displayed, opened, a repeat dropped by the web client), and the plain answer to
// "did anything reach a device twice?". An empty timeline is not an
// answer: the command says herald holds nothing for the id and fails. The
// same content reaching one device under two notification ids (a producer
// that sent one event under two keys) is not a "twice" herald could have
// stopped; SameContent finds it for the warning a recipient's timeline
// prints.
//
// It reads the audit tables written by analytics/auditwriter. Rows are
// selected with LIMIT 1 BY their Kafka position, so the answer stays exact
// even if a record was ever written twice (the tables are ReplacingMergeTree
// keyed by position; see analytics/migrations).
package audit

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

// Selector picks what to show: exactly one of NotificationID, Recipient or
// DedupeKey. Tenant (and Type, for a dedupe key) narrow it; Since and Until
// bound a recipient's timeline (Until zero means now).
type Selector struct {
	NotificationID string
	Recipient      string
	DedupeKey      string
	Tenant         string
	Type           string
	Since, Until   time.Time
}

func (s Selector) validate() error {
	n := 0
	for _, v := range []string{s.NotificationID, s.Recipient, s.DedupeKey} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return errors.New("audit: give exactly one of a notification id, a recipient or a dedupe key")
	}
	if s.Recipient != "" && s.Since.IsZero() {
		return errors.New("audit: a recipient's timeline needs a start time (since)")
	}
	return nil
}

// Position is a record's place in Kafka.
type Position struct {
	Topic     string `ch:"kafka_topic"`
	Partition int32  `ch:"kafka_partition"`
	Offset    int64  `ch:"kafka_offset"`
}

// Request is a request row.
type Request struct {
	Position
	At             time.Time `ch:"at"`
	RequestID      string    `ch:"request_id"`
	NotificationID string    `ch:"notification_id"`
	Tenant         string    `ch:"tenant"`
	Type           string    `ch:"type"`
	Recipient      string    `ch:"recipient"`
	IDSource       string    `ch:"id_source"`
	DedupeKey      string    `ch:"dedupe_key"`
	IdempotencyKey string    `ch:"idempotency_key"`
	Title          string    `ch:"title"`
	Body           string    `ch:"body"`
	Payload        string    `ch:"payload"` // raw JSON, or empty
	Locale         string    `ch:"locale"`
	Channels       []string  `ch:"channels"`
	Producer       string    `ch:"producer"`
	Source         string    `ch:"source"`
}

// Decision is a decision row.
type Decision struct {
	Position
	At             time.Time `ch:"at"`
	DecisionID     string    `ch:"decision_id"`
	Stage          string    `ch:"stage"`
	Outcome        string    `ch:"outcome"`
	Detail         string    `ch:"detail"`
	RequestID      string    `ch:"request_id"`
	NotificationID string    `ch:"notification_id"`
	Tenant         string    `ch:"tenant"`
	Type           string    `ch:"type"`
	Recipient      string    `ch:"recipient"`
	Channel        string    `ch:"channel"`
	// A route decision's deliveries, one element each (migration 0007).
	DeliveryIDs            []string  `ch:"delivery_ids"`
	DeliveryChannels       []string  `ch:"delivery_channels"`
	DeliveryDevices        []string  `ch:"delivery_devices"`
	DeliveryStates         []string  `ch:"delivery_states"`
	OriginalRequestID      string    `ch:"original_request_id"`
	OriginalNotificationID string    `ch:"original_notification_id"`
	OriginalAt             time.Time `ch:"original_at"`
	OriginalOutcome        string    `ch:"original_outcome"`
}

// Attempt is an attempt row.
type Attempt struct {
	Position
	At                time.Time `ch:"at"`
	AttemptID         string    `ch:"attempt_id"`
	DeliveryID        string    `ch:"delivery_id"`
	NotificationID    string    `ch:"notification_id"`
	Tenant            string    `ch:"tenant"`
	Type              string    `ch:"type"`
	Recipient         string    `ch:"recipient"`
	DeviceID          string    `ch:"device_id"`
	Channel           string    `ch:"channel"`
	Attempt           uint16    `ch:"attempt"`
	Result            string    `ch:"result"`
	Classification    string    `ch:"classification"`
	ProviderStatus    int32     `ch:"provider_status"`
	ProviderReason    string    `ch:"provider_reason"`
	ProviderMessageID string    `ch:"provider_message_id"`
	CollapseID        string    `ch:"collapse_id"`
	APNsID            string    `ch:"apns_id"`
	Locale            string    `ch:"locale"`
}

// Outcome is an outcome row.
type Outcome struct {
	Position
	At             time.Time `ch:"at"`
	DeliveryID     string    `ch:"delivery_id"`
	NotificationID string    `ch:"notification_id"`
	Tenant         string    `ch:"tenant"`
	Type           string    `ch:"type"`
	Recipient      string    `ch:"recipient"`
	DeviceID       string    `ch:"device_id"`
	Channel        string    `ch:"channel"`
	Status         string    `ch:"status"`
	Reason         string    `ch:"reason"`
	Attempts       uint16    `ch:"attempts"`
}

// Receipt is a receipt row: what a device reported (displayed, opened,
// or dropped: its seen-set dropped a repeat).
type Receipt struct {
	Position
	At             time.Time `ch:"at"`
	ReceiptID      string    `ch:"receipt_id"`
	Kind           string    `ch:"kind"`
	DeliveryID     string    `ch:"delivery_id"`
	NotificationID string    `ch:"notification_id"`
	Tenant         string    `ch:"tenant"`
	Recipient      string    `ch:"recipient"`
	DeviceID       string    `ch:"device_id"`
	Channel        string    `ch:"channel"`
}

// Timeline is everything the audit holds about a selection.
type Timeline struct {
	Selector  Selector
	Requests  []Request
	Decisions []Decision
	Attempts  []Attempt
	Outcomes  []Outcome
	// Receipts hold one row per receipt id (a receipt the device sent
	// twice is one receipt), the first received.
	Receipts []Receipt
	Verdict  Verdict
}

// Load reads the timeline of sel from database.
func Load(ctx context.Context, conn driver.Conn, database string, sel Selector) (*Timeline, error) {
	if err := sel.validate(); err != nil {
		return nil, err
	}
	if err := migrations.ValidDatabase(database); err != nil {
		return nil, err
	}
	q := querier{conn: conn, db: "`" + database + "`"}
	tl := &Timeline{Selector: sel}

	var where string
	var args []any
	switch {
	case sel.NotificationID != "":
		where, args = "notification_id = ?", []any{sel.NotificationID}
	case sel.Recipient != "":
		until := sel.Until
		if until.IsZero() {
			until = time.Now().Add(time.Minute)
		}
		where = "recipient = ? AND at >= fromUnixTimestamp64Milli(?) AND at < fromUnixTimestamp64Milli(?)"
		args = []any{sel.Recipient, sel.Since.UnixMilli(), until.UnixMilli()}
	default:
		ids, err := q.idsOfDedupeKey(ctx, sel)
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			tl.Verdict = judge(tl)
			return tl, nil
		}
		where, args = "notification_id IN ?", []any{ids}
	}
	if sel.Tenant != "" {
		where += " AND tenant = ?"
		args = append(args, sel.Tenant)
	}
	if err := q.load(ctx, &tl.Requests, "requests", "at, request_id, notification_id, tenant, type, recipient, id_source, dedupe_key, idempotency_key, title, body, payload, locale, channels, producer, source", where, args); err != nil {
		return nil, err
	}
	if err := q.load(ctx, &tl.Decisions, "decisions", "at, decision_id, stage, outcome, detail, request_id, notification_id, tenant, type, recipient, channel, delivery_ids, delivery_channels, delivery_devices, delivery_states, original_request_id, original_notification_id, original_at, original_outcome", where, args); err != nil {
		return nil, err
	}
	if err := q.load(ctx, &tl.Attempts, "attempts", "at, attempt_id, delivery_id, notification_id, tenant, type, recipient, device_id, channel, attempt, result, classification, provider_status, provider_reason, provider_message_id, collapse_id, apns_id, locale", where, args); err != nil {
		return nil, err
	}
	if err := q.load(ctx, &tl.Outcomes, "outcomes", "at, delivery_id, notification_id, tenant, type, recipient, device_id, channel, status, reason, attempts", where, args); err != nil {
		return nil, err
	}
	// One row per receipt id, not per position: a receipt sent twice is
	// one receipt (see migrations/sql/0005_receipts.sql).
	receipts := "SELECT kafka_topic, kafka_partition, kafka_offset, at, receipt_id, kind, delivery_id, notification_id, tenant, recipient, device_id, channel FROM " +
		q.db + ".receipts WHERE decode_error = '' AND " + where + " ORDER BY at, kafka_partition, kafka_offset LIMIT 1 BY receipt_id"
	if err := q.conn.Select(ctx, &tl.Receipts, receipts, args...); err != nil {
		return nil, fmt.Errorf("audit: read receipts: %w", err)
	}
	tl.Verdict = judge(tl)
	return tl, nil
}

type querier struct {
	conn driver.Conn
	db   string
}

// load selects the rows of one table, one per Kafka position, in time order.
func (q querier) load(ctx context.Context, dest any, table, cols, where string, args []any) error {
	query := "SELECT kafka_topic, kafka_partition, kafka_offset, " + cols + " FROM " + q.db + "." + table +
		" WHERE decode_error = '' AND " + where +
		" ORDER BY at, kafka_partition, kafka_offset LIMIT 1 BY kafka_topic, kafka_partition, kafka_offset"
	if err := q.conn.Select(ctx, dest, query, args...); err != nil {
		return fmt.Errorf("audit: read %s: %w", table, err)
	}
	return nil
}

// idsOfDedupeKey finds the notifications whose requests or decisions carry
// the dedupe key.
func (q querier) idsOfDedupeKey(ctx context.Context, sel Selector) ([]string, error) {
	cond := "dedupe_key = ?"
	args := []any{sel.DedupeKey}
	if sel.Tenant != "" {
		cond += " AND tenant = ?"
		args = append(args, sel.Tenant)
	}
	if sel.Type != "" {
		cond += " AND type = ?"
		args = append(args, sel.Type)
	}
	query := "SELECT DISTINCT notification_id FROM (SELECT notification_id FROM " + q.db + ".requests WHERE " + cond +
		" UNION ALL SELECT notification_id FROM " + q.db + ".decisions WHERE " + cond + ") WHERE notification_id != '' ORDER BY notification_id"
	var ids []struct {
		ID string `ch:"notification_id"`
	}
	if err := q.conn.Select(ctx, &ids, query, append(args, args...)...); err != nil {
		return nil, fmt.Errorf("audit: find notifications of dedupe key: %w", err)
	}
	out := make([]string, len(ids))
	for i, x := range ids {
		out[i] = x.ID
	}
	return out, nil
}

// Answer says whether anything reached a device twice.
type Answer int

// Answers, from reassuring to alarming.
const (
	// No: every delivery was sent at most once.
	No Answer = iota
	// Possibly: nothing was certainly sent twice, but an ambiguous timeout
	// was retried, so the provider may have delivered two copies (with the
	// same collapse id: the device shows one notification).
	Possibly
	// Yes: a device was sent the same notification more than once.
	Yes
)

func (a Answer) String() string {
	return [...]string{"NO", "POSSIBLY", "YES"}[a]
}

// Verdict is the answer and the facts behind it.
type Verdict struct {
	Answer Answer
	// Notifications, Deliveries and Sent count what the timeline holds.
	Notifications, Deliveries, Sent int
	// SentTwice counts deliveries sent more than once; Ambiguous those
	// retried after an ambiguous timeout (and not certainly sent twice).
	SentTwice, Ambiguous int
	// Reasons explain a Yes or Possibly, one line per delivery or
	// notification concerned.
	Reasons []string
}

// judge decides the verdict from the attempts and decisions.
func judge(tl *Timeline) Verdict {
	type delivery struct {
		notification, device, channel string
		sent, ambiguous               []Attempt
	}
	deliveries := map[string]*delivery{}
	var order []string
	for _, a := range tl.Attempts {
		d, ok := deliveries[a.DeliveryID]
		if !ok {
			d = &delivery{notification: a.NotificationID, device: a.DeviceID, channel: a.Channel}
			deliveries[a.DeliveryID] = d
			order = append(order, a.DeliveryID)
		}
		switch a.Result {
		case schemas.AttemptSent:
			d.sent = append(d.sent, a)
		case schemas.AttemptAmbiguous:
			d.ambiguous = append(d.ambiguous, a)
		}
	}
	notifications := map[string]bool{}
	accepted := map[string][]Decision{}
	for _, d := range tl.Decisions {
		notifications[d.NotificationID] = true
		if d.Outcome == schemas.DecisionAccepted {
			accepted[d.NotificationID] = append(accepted[d.NotificationID], d)
		}
	}
	for _, d := range tl.Requests {
		notifications[d.NotificationID] = true
	}
	v := Verdict{Notifications: len(notifications), Deliveries: len(deliveries)}
	var yes, maybe []string
	for _, id := range order {
		d := deliveries[id]
		v.Sent += len(d.sent)
		switch {
		case len(d.sent) >= 2:
			yes = append(yes, fmt.Sprintf("delivery %s (notification %s, %s device %s) was sent %d times: %s%s",
				id, d.notification, d.channel, d.device, len(d.sent), attemptList(d.sent), whyAgain(accepted[d.notification])))
		case len(d.ambiguous) > 0 && len(d.sent)+len(d.ambiguous) >= 2:
			maybe = append(maybe, fmt.Sprintf("delivery %s (notification %s, %s device %s): %d ambiguous timeout(s) (%s) then retried; "+
				"the provider may have delivered more than one copy, all with collapse id %s, so the device shows one notification",
				id, d.notification, d.channel, d.device, len(d.ambiguous), attemptList(d.ambiguous), collapseOf(d.sent, d.ambiguous)))
		}
	}
	v.SentTwice, v.Ambiguous = len(yes), len(maybe)
	switch {
	case len(yes) > 0:
		v.Answer, v.Reasons = Yes, append(yes, maybe...)
	case len(maybe) > 0:
		v.Answer, v.Reasons = Possibly, maybe
	}
	return v
}

// whyAgain explains a notification accepted more than once.
func whyAgain(acc []Decision) string {
	if len(acc) < 2 {
		return ""
	}
	parts := make([]string, len(acc))
	for i, d := range acc {
		parts[i] = fmt.Sprintf("request %s at %s", d.RequestID, stamp(d.At))
	}
	return fmt.Sprintf("; the notification was accepted %d times (%s): each request came after the previous one's dedupe window had ended, so herald sent it again as a new notification",
		len(acc), strings.Join(parts, ", "))
}

func attemptList(as []Attempt) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("attempt %d at %s", a.Attempt, stamp(a.At))
	}
	return strings.Join(parts, ", ")
}

func collapseOf(lists ...[]Attempt) string {
	for _, l := range lists {
		for _, a := range l {
			if a.CollapseID != "" {
				return a.CollapseID
			}
		}
	}
	return "(none recorded)"
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// event is one line of the printed timeline.
type event struct {
	at    time.Time
	kind  int // order of kinds at equal times: request, decision, attempt, outcome, receipt
	pos   Position
	label string
	text  string
	nid   string // the notification the line is about
}

// events returns the timeline's lines in time order.
func (tl *Timeline) events() []event {
	var evs []event
	for _, r := range tl.Requests {
		key := ""
		switch {
		case r.DedupeKey != "":
			key = " dedupeKey=" + r.DedupeKey
		case r.IdempotencyKey != "":
			key = " idempotencyKey=" + r.IdempotencyKey
		}
		evs = append(evs, event{at: r.At, kind: 0, pos: r.Position, label: sdk.EventRequested, nid: r.NotificationID, text: fmt.Sprintf("%s for %s/%s: request %s, notification %s (id from %s)%s, via %s from %s, locale %s, channels %s, title %q",
			r.Type, r.Tenant, r.Recipient, r.RequestID, r.NotificationID, r.IDSource, key, r.Source, orNone(r.Producer), orNone(r.Locale),
			orNone(strings.Join(r.Channels, ",")), r.Title)})
	}
	for _, d := range tl.Decisions {
		text := fmt.Sprintf("%s stage: %s (request %s, notification %s)", d.Stage, d.Outcome, d.RequestID, d.NotificationID)
		if d.OriginalRequestID != "" {
			text += fmt.Sprintf(": repeat of request %s of %s, which was %s", d.OriginalRequestID, stamp(d.OriginalAt), d.OriginalOutcome)
		}
		if d.Channel != "" {
			text += ", channel " + d.Channel
		}
		if d.Detail != "" {
			text += " — " + d.Detail
		}
		evs = append(evs, event{at: d.At, kind: 1, pos: d.Position, label: "decision", nid: d.NotificationID, text: text})
	}
	for _, a := range tl.Attempts {
		text := fmt.Sprintf("%s to device %s, attempt %d: %s", a.Channel, a.DeviceID, a.Attempt, a.Result)
		if a.Classification != "" {
			text += " (" + a.Classification
			if a.ProviderStatus != 0 || a.ProviderReason != "" {
				text += strings.TrimSpace(fmt.Sprintf(", provider %d %s", a.ProviderStatus, a.ProviderReason))
			}
			text += ")"
		}
		text += fmt.Sprintf(", delivery %s, collapse id %s", a.DeliveryID, orNone(a.CollapseID))
		if a.APNsID != "" {
			text += ", apns-id " + a.APNsID
		}
		if a.ProviderMessageID != "" {
			text += ", provider message " + a.ProviderMessageID
		}
		if a.Locale != "" {
			text += ", locale " + a.Locale
		}
		evs = append(evs, event{at: a.At, kind: 2, pos: a.Position, label: "attempt", nid: a.NotificationID, text: text})
	}
	for _, o := range tl.Outcomes {
		text := fmt.Sprintf("%s to device %s: %s after %d attempt(s), delivery %s", o.Channel, o.DeviceID, o.Status, o.Attempts, o.DeliveryID)
		if o.Reason != "" {
			text += " — " + o.Reason
		}
		evs = append(evs, event{at: o.At, kind: 3, pos: o.Position, label: "outcome", nid: o.NotificationID, text: text})
	}
	for _, r := range tl.Receipts {
		text := fmt.Sprintf("%s device %s reported %s, delivery %s, receipt %s", r.Channel, r.DeviceID, r.Kind, r.DeliveryID, r.ReceiptID)
		if r.Kind == schemas.ReceiptDropped {
			text += " (its seen-set dropped a repeat: the device received this notification again and did not show it)"
		}
		evs = append(evs, event{at: r.At, kind: 4, pos: r.Position, label: "receipt", nid: r.NotificationID, text: text})
	}
	sort.SliceStable(evs, func(i, j int) bool {
		a, b := evs[i], evs[j]
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		if a.pos.Partition != b.pos.Partition {
			return a.pos.Partition < b.pos.Partition
		}
		return a.pos.Offset < b.pos.Offset
	})
	return evs
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Event is one line of the timeline: when, the kind of record (request,
// decision, attempt or outcome), its position in Kafka, and what it says
// (the text Print prints).
type Event struct {
	At       time.Time
	Kind     string
	Position Position
	Text     string
}

// Events returns the timeline's events in the order Print prints them:
// by time, then request, decision, attempt, outcome, then position.
func (tl *Timeline) Events() []Event {
	evs := tl.events()
	out := make([]Event, len(evs))
	for i, e := range evs {
		out[i] = Event{At: e.at, Kind: e.label, Position: e.pos, Text: e.text}
	}
	return out
}

// Sentence is the answer in one line.
func (v Verdict) Sentence() string {
	switch v.Answer {
	case Yes:
		return fmt.Sprintf("Did anything reach a device twice? YES: %d delivery(ies) were sent more than once.", v.SentTwice)
	case Possibly:
		return fmt.Sprintf("Did anything reach a device twice? POSSIBLY: nothing was certainly sent twice, but %d delivery(ies) were retried after an ambiguous provider timeout.", v.Ambiguous)
	}
	if v.Deliveries == 0 {
		return fmt.Sprintf("Did anything reach a device twice? NO: nothing was sent to any device (%d notification(s)).", v.Notifications)
	}
	return fmt.Sprintf("Did anything reach a device twice? NO: %d delivery(ies) of %d notification(s), each sent at most once (%d sent).",
		v.Deliveries, v.Notifications, v.Sent)
}
