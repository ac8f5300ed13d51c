package auditwriter

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
)

// maxRaw bounds the raw value kept for a record that cannot be decoded.
const maxRaw = 64 << 10

// batch collects the rows of one table, column by column, between inserts.
type batch interface {
	// load decodes r as the batch's next row, without adding it, and
	// returns the month of the row's time (the table's partition,
	// toYYYYMM(at) in UTC); keep then adds the loaded row. A record that
	// does not decode becomes a row with decode_error and raw set.
	load(r *kgo.Record) int32
	keep()
	len() int
	// month is the month of every row held (0 when empty): a batch never
	// holds two, so its INSERT writes one part of one partition.
	month() int32
	// columns returns the column names of the INSERT and, in the same
	// order, one slice per column.
	columns() ([]string, []any)
	reset()
	// span returns the offsets held, per partition: first and last.
	span() map[int32][2]int64
}

// add loads r and keeps it, whatever its month: for tests that build
// batches of one month.
func add(b batch, r *kgo.Record) { b.load(r); b.keep() }

// monthOf is toYYYYMM of a time in milliseconds, in UTC: the partition of
// the row.
func monthOf(ms int64) int32 {
	t := time.UnixMilli(ms).UTC()
	return int32(t.Year()*100 + int(t.Month()))
}

// position holds the columns every audit table shares.
type position struct {
	mon       int32
	next      *kgo.Record // loaded, not yet kept
	nextAt    int64
	nextErr   error
	topic     []string
	partition []int32
	offset    []int64
	at        []time.Time
	decodeErr []string
	raw       []string
	ranges    map[int32][2]int64
}

// loadPosition loads the position of r, whose row time is at (the record
// time when at <= 0), and returns the row's month.
func (p *position) loadPosition(r *kgo.Record, at int64, decodeErr error) int32 {
	if at <= 0 {
		at = r.Timestamp.UnixMilli()
	}
	p.next, p.nextAt, p.nextErr = r, at, decodeErr
	return monthOf(at)
}

// keepPosition adds the loaded position.
func (p *position) keepPosition() {
	r, at, decodeErr := p.next, p.nextAt, p.nextErr
	p.next, p.nextErr = nil, nil
	if len(p.offset) == 0 {
		p.mon = monthOf(at)
	}
	p.topic = append(p.topic, r.Topic)
	p.partition = append(p.partition, r.Partition)
	p.offset = append(p.offset, r.Offset)
	p.at = append(p.at, time.UnixMilli(at).UTC())
	if decodeErr != nil {
		p.decodeErr = append(p.decodeErr, decodeErr.Error())
		p.raw = append(p.raw, rawValue(r.Value))
	} else {
		p.decodeErr = append(p.decodeErr, "")
		p.raw = append(p.raw, "")
	}
	if p.ranges == nil {
		p.ranges = map[int32][2]int64{}
	}
	rg, ok := p.ranges[r.Partition]
	if !ok {
		rg[0] = r.Offset
	}
	rg[1] = r.Offset
	p.ranges[r.Partition] = rg
}

// rawValue keeps at most maxRaw bytes of valid UTF-8.
func rawValue(v []byte) string {
	if len(v) > maxRaw {
		v = v[:maxRaw]
	}
	return strings.ToValidUTF8(string(v), string(utf8.RuneError))
}

func (p *position) len() int                 { return len(p.offset) }
func (p *position) month() int32             { return p.mon }
func (p *position) span() map[int32][2]int64 { return p.ranges }

func (p *position) resetPosition() {
	p.topic, p.partition, p.offset, p.at = p.topic[:0], p.partition[:0], p.offset[:0], p.at[:0]
	p.decodeErr, p.raw = p.decodeErr[:0], p.raw[:0]
	p.ranges = nil
	p.mon, p.next, p.nextErr = 0, nil, nil
}

func (p *position) positionColumns() ([]string, []any) {
	return []string{"kafka_topic", "kafka_partition", "kafka_offset", "at", "decode_error", "raw"},
		[]any{p.topic, p.partition, p.offset, p.at, p.decodeErr, p.raw}
}

// token is the batch's part of its inserts' deduplication tokens: a
// function of the table, the month (partition) and the offsets it holds,
// which no other batch shares. An insert's token is it, "-" and a random
// suffix (flush), so resendLastInsert recognises the batch it rebuilds
// from Kafka by it.
func token(table string, b batch) string {
	sp := b.span()
	parts := make([]int32, 0, len(sp))
	for p := range sp {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s|%d|%d", table, b.month(), b.len())
	for _, p := range parts {
		fmt.Fprintf(&sb, "|%d:%d-%d", p, sp[p][0], sp[p][1])
	}
	sum := sha256.Sum256([]byte(sb.String()))
	return "herald-audit-" + hex.EncodeToString(sum[:16])
}

func ms(v int64) time.Time {
	if v <= 0 {
		return time.Unix(0, 0).UTC()
	}
	return time.UnixMilli(v).UTC()
}

// decodeValue decodes r's value into v, a record named name whose Schema
// field is schema, and checks the schema name as schemas.Decode does, in one
// JSON pass instead of two (decoding is most of the writer's CPU). A
// binary value goes through schemas.Decode.
func decodeValue(r *kgo.Record, v any, name string, schema *string) error {
	if r.Value == nil {
		return errors.New("empty value (tombstone) on an event topic")
	}
	if rec, ok := v.(schemas.Record); ok && !schemas.IsJSON(r.Value) {
		// A binary record (herald.request/v2, herald.decision/v2,
		// herald.accepted/v2): Decode reads and checks it, its Schema
		// field naming its version; any other record is refused there.
		return schemas.Decode(r.Value, rec)
	}
	if err := json.Unmarshal(r.Value, v); err != nil {
		return fmt.Errorf("schemas: decode %s: %w", name, err)
	}
	if *schema != name {
		return fmt.Errorf("%w: got %q, want %q", schemas.ErrSchema, *schema, name)
	}
	return nil
}

// column is one column of a table whose rows are records R: its name and
// the values of the rows held.
type column[R any] interface {
	name() string
	add(v *R)
	values() any // the typed slice the INSERT appends
	reset()
}

type typedColumn[R, T any] struct {
	n    string
	get  func(v *R) T
	vals []T
}

// col is the column name; a row's value is get of its record.
func col[R, T any](name string, get func(v *R) T) column[R] {
	return &typedColumn[R, T]{n: name, get: get}
}

func (c *typedColumn[R, T]) name() string { return c.n }
func (c *typedColumn[R, T]) add(v *R)     { c.vals = append(c.vals, c.get(v)) }
func (c *typedColumn[R, T]) values() any  { return c.vals }
func (c *typedColumn[R, T]) reset()       { c.vals = nil }

// rows is the batch of a table whose rows are records R: the position
// columns every table has, then cols.
type rows[R schemas.Record] struct {
	position
	v R // loaded, not yet kept
	// schema returns the record's Schema field, checked on decoding.
	schema func(v *R) *string
	// at returns the row's time in milliseconds; 0 (or less): the record
	// time.
	at   func(v *R) int64
	cols []column[R]
}

func (b *rows[R]) load(r *kgo.Record) int32 {
	var zero R
	b.v = zero
	err := decodeValue(r, &b.v, b.v.SchemaName(), b.schema(&b.v))
	if err != nil {
		b.v = zero
	}
	return b.loadPosition(r, b.at(&b.v), err)
}

func (b *rows[R]) keep() {
	b.keepPosition()
	for _, c := range b.cols {
		c.add(&b.v)
	}
}

func (b *rows[R]) columns() ([]string, []any) {
	names, cols := b.positionColumns()
	for _, c := range b.cols {
		names, cols = append(names, c.name()), append(cols, c.values())
	}
	return names, cols
}

func (b *rows[R]) reset() {
	var zero R
	b.v = zero
	for _, c := range b.cols {
		c.reset()
	}
	b.resetPosition()
}

// count16 is a count as a UInt16 column holds it: clamped to 0..65535.
func count16(n int) uint16 { return uint16(min(max(n, 0), 65535)) }

// newRequestsBatch holds rows of the requests table.
func newRequestsBatch() batch {
	type R = schemas.Request
	return &rows[R]{
		schema: func(v *R) *string { return &v.Schema },
		// The dedupe stage decides on the record time, so the audit does too.
		at: func(*R) int64 { return 0 },
		cols: []column[R]{
			col("request_id", func(v *R) string { return v.RequestID }),
			col("tenant", func(v *R) string { return v.Tenant }),
			col("type", func(v *R) string { return v.Type }),
			col("recipient", func(v *R) string { return v.Recipient }),
			col("notification_id", func(v *R) string { return v.NotificationID }),
			col("id_source", func(v *R) string { return v.IDSource }),
			col("key", func(v *R) string { return string(v.Key) }),
			col("dedupe_key", func(v *R) string { return v.DedupeKey }),
			col("dedupe_window_ms", func(v *R) int64 { return v.DedupeWindowMs }),
			col("idempotency_key", func(v *R) string { return v.IdempotencyKey }),
			col("idempotency_ttl_ms", func(v *R) int64 { return v.IdempotencyTTLMs }),
			col("title", func(v *R) string { return v.Title }),
			col("body", func(v *R) string { return v.Body }),
			col("payload", func(v *R) string { return string(v.Payload) }),
			col("locale", func(v *R) string { return v.Locale }),
			col("channels", func(v *R) []string { return append([]string{}, v.Channels...) }),
			col("target_device", func(v *R) string { return v.TargetDevice }),
			col("producer", func(v *R) string { return v.Producer }),
			col("source", func(v *R) string { return v.Source }),
			col("created_at", func(v *R) time.Time { return ms(v.CreatedAt) }),
		},
	}
}

// newDecisionsBatch holds rows of the decisions table.
func newDecisionsBatch() batch {
	type R = schemas.Decision
	return &rows[R]{
		schema: func(v *R) *string { return &v.Schema },
		at:     func(v *R) int64 { return v.At },
		cols: []column[R]{
			col("decision_id", func(v *R) string { return v.DecisionID }),
			col("stage", func(v *R) string { return v.Stage }),
			col("outcome", func(v *R) string { return v.Outcome }),
			col("detail", func(v *R) string { return v.Detail }),
			col("request_id", func(v *R) string { return v.RequestID }),
			col("tenant", func(v *R) string { return v.Tenant }),
			col("type", func(v *R) string { return v.Type }),
			col("recipient", func(v *R) string { return v.Recipient }),
			col("notification_id", func(v *R) string { return v.NotificationID }),
			col("dedupe_key", func(v *R) string { return v.DedupeKey }),
			col("idempotency_key", func(v *R) string { return v.IdempotencyKey }),
			col("producer", func(v *R) string { return v.Producer }),
			col("channel", func(v *R) string { return v.Channel }),
			col("delivery_ids", func(v *R) []string {
				return deliveryField(v.Deliveries, func(d *schemas.DecisionDelivery) string { return d.DeliveryID })
			}),
			col("delivery_channels", func(v *R) []string {
				return deliveryField(v.Deliveries, func(d *schemas.DecisionDelivery) string { return d.Channel })
			}),
			col("delivery_devices", func(v *R) []string {
				return deliveryField(v.Deliveries, func(d *schemas.DecisionDelivery) string { return d.DeviceID })
			}),
			col("delivery_states", func(v *R) []string {
				return deliveryField(v.Deliveries, func(d *schemas.DecisionDelivery) string { return d.State })
			}),
			col("original_request_id", func(v *R) string { return v.OriginalRequestID }),
			col("original_notification_id", func(v *R) string { return v.OriginalNotificationID }),
			col("original_at", func(v *R) time.Time { return ms(v.OriginalAt) }),
			col("original_outcome", func(v *R) string { return v.OriginalOutcome }),
			col("source_topic", func(v *R) string { return v.SourceTopic }),
			col("source_partition", func(v *R) int32 { return v.SourcePartition }),
			col("source_offset", func(v *R) int64 { return v.SourceOffset }),
		},
	}
}

// deliveryField is one field of every delivery of a decision, as one of
// the decisions table's parallel delivery arrays (never nil: ClickHouse
// takes an empty array).
func deliveryField(ds []schemas.DecisionDelivery, get func(*schemas.DecisionDelivery) string) []string {
	out := make([]string, len(ds))
	for i := range ds {
		out[i] = get(&ds[i])
	}
	return out
}

// newAttemptsBatch holds rows of the attempts table.
func newAttemptsBatch() batch {
	type R = schemas.Attempt
	return &rows[R]{
		schema: func(v *R) *string { return &v.Schema },
		at:     func(v *R) int64 { return v.At },
		cols: []column[R]{
			col("attempt_id", func(v *R) string { return v.AttemptID }),
			col("delivery_id", func(v *R) string { return v.DeliveryID }),
			col("notification_id", func(v *R) string { return v.NotificationID }),
			col("tenant", func(v *R) string { return v.Tenant }),
			col("type", func(v *R) string { return v.Type }),
			col("recipient", func(v *R) string { return v.Recipient }),
			col("device_id", func(v *R) string { return v.DeviceID }),
			col("channel", func(v *R) string { return v.Channel }),
			col("attempt", func(v *R) uint16 { return count16(v.Attempt) }),
			col("result", func(v *R) string { return v.Result }),
			col("classification", func(v *R) string { return v.Classification }),
			col("provider_status", func(v *R) int32 { return int32(v.ProviderStatus) }),
			col("provider_reason", func(v *R) string { return v.ProviderReason }),
			col("provider_message_id", func(v *R) string { return v.ProviderMessageID }),
			col("collapse_id", func(v *R) string { return v.CollapseID }),
			col("apns_id", func(v *R) string { return v.APNsID }),
			col("locale", func(v *R) string { return v.Locale }),
			col("latency_ms", func(v *R) int64 { return v.LatencyMs }),
			col("retry_after_ms", func(v *R) int64 { return v.RetryAfterMs }),
		},
	}
}

// newOutcomesBatch holds rows of the outcomes table.
func newOutcomesBatch() batch {
	type R = schemas.Outcome
	return &rows[R]{
		schema: func(v *R) *string { return &v.Schema },
		at:     func(v *R) int64 { return v.At },
		cols: []column[R]{
			col("delivery_id", func(v *R) string { return v.DeliveryID }),
			col("notification_id", func(v *R) string { return v.NotificationID }),
			col("tenant", func(v *R) string { return v.Tenant }),
			col("type", func(v *R) string { return v.Type }),
			col("recipient", func(v *R) string { return v.Recipient }),
			col("device_id", func(v *R) string { return v.DeviceID }),
			col("channel", func(v *R) string { return v.Channel }),
			col("status", func(v *R) string { return v.Status }),
			col("reason", func(v *R) string { return v.Reason }),
			col("attempts", func(v *R) uint16 { return count16(v.Attempts) }),
		},
	}
}

// newReceiptsBatch holds rows of the receipts table.
func newReceiptsBatch() batch {
	type R = schemas.Receipt
	return &rows[R]{
		schema: func(v *R) *string { return &v.Schema },
		at:     func(v *R) int64 { return v.At },
		cols: []column[R]{
			col("receipt_id", func(v *R) string { return v.ReceiptID }),
			col("kind", func(v *R) string { return v.Kind }),
			col("delivery_id", func(v *R) string { return v.DeliveryID }),
			col("notification_id", func(v *R) string { return v.NotificationID }),
			col("tenant", func(v *R) string { return v.Tenant }),
			col("type", func(v *R) string { return v.Type }),
			col("recipient", func(v *R) string { return v.Recipient }),
			col("device_id", func(v *R) string { return v.DeviceID }),
			col("channel", func(v *R) string { return v.Channel }),
			col("client_at", func(v *R) time.Time { return ms(v.ClientAt) }),
		},
	}
}

// newFeedItemsBatch holds rows of the feed_items table: every version of
// an in-app feed item (the sink's, then the API's read marks), each at the
// notification's creation time so that they meet in one partition.
func newFeedItemsBatch() batch {
	type R = schemas.FeedItem
	return &rows[R]{
		schema: func(v *R) *string { return &v.Schema },
		at:     func(v *R) int64 { return v.CreatedAt },
		cols: []column[R]{
			col("tenant", func(v *R) string { return v.Tenant }),
			col("recipient", func(v *R) string { return v.Recipient }),
			col("notification_id", func(v *R) string { return v.NotificationID }),
			col("type", func(v *R) string { return v.Type }),
			col("title", func(v *R) string { return v.Title }),
			col("body", func(v *R) string { return v.Body }),
			col("payload", func(v *R) string { return string(v.Payload) }),
			col("delivered_at", func(v *R) time.Time { return ms(v.DeliveredAt) }),
			col("read_at", func(v *R) time.Time { return ms(v.ReadAt) }),
		},
	}
}
