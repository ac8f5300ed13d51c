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

// token is the insert deduplication token of a batch: a function of the
// table, the month (partition) and the offsets it holds, so a retried insert
// of the same batch is recognised by ClickHouse and dropped, and no other
// batch shares it.
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

// decodeValue decodes r's value into v, whose Schema field is schema, and
// checks the schema name as schemas.Decode does, in one JSON pass instead of
// two (decoding is most of the writer's CPU).
func decodeValue(r *kgo.Record, v schemas.Record, schema *string) error {
	if r.Value == nil {
		return errors.New("empty value (tombstone) on an event topic")
	}
	if err := json.Unmarshal(r.Value, v); err != nil {
		return fmt.Errorf("schemas: decode %s: %w", v.SchemaName(), err)
	}
	if *schema != v.SchemaName() {
		return fmt.Errorf("%w: got %q, want %q", schemas.ErrSchema, *schema, v.SchemaName())
	}
	return nil
}

// requestsBatch rows go to the requests table.
type requestsBatch struct {
	position
	v schemas.Request // loaded, not yet kept

	requestID, tenant, typ, recipient, notificationID, idSource, key, dedupeKey []string
	dedupeWindowMs, idempotencyTTLMs                                            []int64
	idempotencyKey, contentHash, title, body, payload, locale                   []string
	channels                                                                    [][]string
	targetDevice, producer, source                                              []string
	createdAt                                                                   []time.Time
}

func (b *requestsBatch) load(r *kgo.Record) int32 {
	b.v = schemas.Request{}
	err := decodeValue(r, &b.v, &b.v.Schema)
	if err != nil {
		b.v = schemas.Request{}
	}
	// The dedupe stage decides on the record time, so the audit does too.
	return b.loadPosition(r, r.Timestamp.UnixMilli(), err)
}

func (b *requestsBatch) keep() {
	v := &b.v
	b.keepPosition()
	b.requestID = append(b.requestID, v.RequestID)
	b.tenant = append(b.tenant, v.Tenant)
	b.typ = append(b.typ, v.Type)
	b.recipient = append(b.recipient, v.Recipient)
	b.notificationID = append(b.notificationID, v.NotificationID)
	b.idSource = append(b.idSource, v.IDSource)
	b.key = append(b.key, string(v.Key))
	b.dedupeKey = append(b.dedupeKey, v.DedupeKey)
	b.dedupeWindowMs = append(b.dedupeWindowMs, v.DedupeWindowMs)
	b.idempotencyKey = append(b.idempotencyKey, v.IdempotencyKey)
	b.idempotencyTTLMs = append(b.idempotencyTTLMs, v.IdempotencyTTLMs)
	b.title = append(b.title, v.Title)
	b.body = append(b.body, v.Body)
	b.payload = append(b.payload, string(v.Payload))
	b.locale = append(b.locale, v.Locale)
	b.channels = append(b.channels, append([]string{}, v.Channels...))
	b.targetDevice = append(b.targetDevice, v.TargetDevice)
	b.producer = append(b.producer, v.Producer)
	b.source = append(b.source, v.Source)
	b.createdAt = append(b.createdAt, ms(v.CreatedAt))
}

func (b *requestsBatch) columns() ([]string, []any) {
	names, cols := b.positionColumns()
	return append(names, "request_id", "tenant", "type", "recipient", "notification_id", "id_source", "key", "dedupe_key",
			"dedupe_window_ms", "idempotency_key", "idempotency_ttl_ms", "title", "body", "payload", "locale",
			"channels", "target_device", "producer", "source", "created_at"),
		append(cols, b.requestID, b.tenant, b.typ, b.recipient, b.notificationID, b.idSource, b.key, b.dedupeKey,
			b.dedupeWindowMs, b.idempotencyKey, b.idempotencyTTLMs, b.title, b.body, b.payload, b.locale,
			b.channels, b.targetDevice, b.producer, b.source, b.createdAt)
}

func (b *requestsBatch) reset() { *b = requestsBatch{position: b.position}; b.resetPosition() }

// decisionsBatch rows go to the decisions table.
type decisionsBatch struct {
	position
	v schemas.Decision // loaded, not yet kept

	decisionID, stage, outcome, detail, requestID, tenant, typ, recipient, notificationID []string
	dedupeKey, idempotencyKey, producer, channel                                          []string
	originalRequestID, originalNotificationID                                             []string
	originalAt                                                                            []time.Time
	originalOutcome, sourceTopic                                                          []string
	sourcePartition                                                                       []int32
	sourceOffset                                                                          []int64
}

func (b *decisionsBatch) load(r *kgo.Record) int32 {
	b.v = schemas.Decision{}
	err := decodeValue(r, &b.v, &b.v.Schema)
	if err != nil {
		b.v = schemas.Decision{}
	}
	return b.loadPosition(r, b.v.At, err)
}

func (b *decisionsBatch) keep() {
	v := &b.v
	b.keepPosition()
	b.decisionID = append(b.decisionID, v.DecisionID)
	b.stage = append(b.stage, v.Stage)
	b.outcome = append(b.outcome, v.Outcome)
	b.detail = append(b.detail, v.Detail)
	b.requestID = append(b.requestID, v.RequestID)
	b.tenant = append(b.tenant, v.Tenant)
	b.typ = append(b.typ, v.Type)
	b.recipient = append(b.recipient, v.Recipient)
	b.notificationID = append(b.notificationID, v.NotificationID)
	b.dedupeKey = append(b.dedupeKey, v.DedupeKey)
	b.idempotencyKey = append(b.idempotencyKey, v.IdempotencyKey)
	b.producer = append(b.producer, v.Producer)
	b.channel = append(b.channel, v.Channel)
	b.originalRequestID = append(b.originalRequestID, v.OriginalRequestID)
	b.originalNotificationID = append(b.originalNotificationID, v.OriginalNotificationID)
	b.originalAt = append(b.originalAt, ms(v.OriginalAt))
	b.originalOutcome = append(b.originalOutcome, v.OriginalOutcome)
	b.sourceTopic = append(b.sourceTopic, v.SourceTopic)
	b.sourcePartition = append(b.sourcePartition, v.SourcePartition)
	b.sourceOffset = append(b.sourceOffset, v.SourceOffset)
}

func (b *decisionsBatch) columns() ([]string, []any) {
	names, cols := b.positionColumns()
	return append(names, "decision_id", "stage", "outcome", "detail", "request_id", "tenant", "type", "recipient",
			"notification_id", "dedupe_key", "idempotency_key", "producer", "channel", "original_request_id",
			"original_notification_id", "original_at", "original_outcome", "source_topic", "source_partition", "source_offset"),
		append(cols, b.decisionID, b.stage, b.outcome, b.detail, b.requestID, b.tenant, b.typ, b.recipient,
			b.notificationID, b.dedupeKey, b.idempotencyKey, b.producer, b.channel, b.originalRequestID,
			b.originalNotificationID, b.originalAt, b.originalOutcome, b.sourceTopic, b.sourcePartition, b.sourceOffset)
}

func (b *decisionsBatch) reset() { *b = decisionsBatch{position: b.position}; b.resetPosition() }

// attemptsBatch rows go to the attempts table.
type attemptsBatch struct {
	position
	v schemas.Attempt // loaded, not yet kept

	attemptID, deliveryID, notificationID, tenant, typ, recipient, deviceID, channel []string
	attempt                                                                          []uint16
	result, classification                                                           []string
	providerStatus                                                                   []int32
	providerReason, providerMessageID, collapseID, apnsID, locale                    []string
	latencyMs, retryAfterMs                                                          []int64
}

func (b *attemptsBatch) load(r *kgo.Record) int32 {
	b.v = schemas.Attempt{}
	err := decodeValue(r, &b.v, &b.v.Schema)
	if err != nil {
		b.v = schemas.Attempt{}
	}
	return b.loadPosition(r, b.v.At, err)
}

func (b *attemptsBatch) keep() {
	v := &b.v
	b.keepPosition()
	b.attemptID = append(b.attemptID, v.AttemptID)
	b.deliveryID = append(b.deliveryID, v.DeliveryID)
	b.notificationID = append(b.notificationID, v.NotificationID)
	b.tenant = append(b.tenant, v.Tenant)
	b.typ = append(b.typ, v.Type)
	b.recipient = append(b.recipient, v.Recipient)
	b.deviceID = append(b.deviceID, v.DeviceID)
	b.channel = append(b.channel, v.Channel)
	b.attempt = append(b.attempt, uint16(min(max(v.Attempt, 0), 65535)))
	b.result = append(b.result, v.Result)
	b.classification = append(b.classification, v.Classification)
	b.providerStatus = append(b.providerStatus, int32(v.ProviderStatus))
	b.providerReason = append(b.providerReason, v.ProviderReason)
	b.providerMessageID = append(b.providerMessageID, v.ProviderMessageID)
	b.collapseID = append(b.collapseID, v.CollapseID)
	b.apnsID = append(b.apnsID, v.APNsID)
	b.locale = append(b.locale, v.Locale)
	b.latencyMs = append(b.latencyMs, v.LatencyMs)
	b.retryAfterMs = append(b.retryAfterMs, v.RetryAfterMs)
}

func (b *attemptsBatch) columns() ([]string, []any) {
	names, cols := b.positionColumns()
	return append(names, "attempt_id", "delivery_id", "notification_id", "tenant", "type", "recipient", "device_id", "channel",
			"attempt", "result", "classification", "provider_status", "provider_reason", "provider_message_id", "collapse_id",
			"apns_id", "locale", "latency_ms", "retry_after_ms"),
		append(cols, b.attemptID, b.deliveryID, b.notificationID, b.tenant, b.typ, b.recipient, b.deviceID, b.channel,
			b.attempt, b.result, b.classification, b.providerStatus, b.providerReason, b.providerMessageID, b.collapseID,
			b.apnsID, b.locale, b.latencyMs, b.retryAfterMs)
}

func (b *attemptsBatch) reset() { *b = attemptsBatch{position: b.position}; b.resetPosition() }

// outcomesBatch rows go to the outcomes table.
type outcomesBatch struct {
	position
	v schemas.Outcome // loaded, not yet kept

	deliveryID, notificationID, tenant, typ, recipient, deviceID, channel, status, reason []string
	attempts                                                                              []uint16
}

func (b *outcomesBatch) load(r *kgo.Record) int32 {
	b.v = schemas.Outcome{}
	err := decodeValue(r, &b.v, &b.v.Schema)
	if err != nil {
		b.v = schemas.Outcome{}
	}
	return b.loadPosition(r, b.v.At, err)
}

func (b *outcomesBatch) keep() {
	v := &b.v
	b.keepPosition()
	b.deliveryID = append(b.deliveryID, v.DeliveryID)
	b.notificationID = append(b.notificationID, v.NotificationID)
	b.tenant = append(b.tenant, v.Tenant)
	b.typ = append(b.typ, v.Type)
	b.recipient = append(b.recipient, v.Recipient)
	b.deviceID = append(b.deviceID, v.DeviceID)
	b.channel = append(b.channel, v.Channel)
	b.status = append(b.status, v.Status)
	b.reason = append(b.reason, v.Reason)
	b.attempts = append(b.attempts, uint16(min(max(v.Attempts, 0), 65535)))
}

func (b *outcomesBatch) columns() ([]string, []any) {
	names, cols := b.positionColumns()
	return append(names, "delivery_id", "notification_id", "tenant", "type", "recipient", "device_id", "channel", "status", "reason", "attempts"),
		append(cols, b.deliveryID, b.notificationID, b.tenant, b.typ, b.recipient, b.deviceID, b.channel, b.status, b.reason, b.attempts)
}

func (b *outcomesBatch) reset() { *b = outcomesBatch{position: b.position}; b.resetPosition() }

// receiptsBatch rows go to the receipts table.
type receiptsBatch struct {
	position
	v schemas.Receipt // loaded, not yet kept

	receiptID, kind, deliveryID, notificationID, tenant, typ, recipient, deviceID, channel []string
	clientAt                                                                               []time.Time
}

func (b *receiptsBatch) load(r *kgo.Record) int32 {
	b.v = schemas.Receipt{}
	err := decodeValue(r, &b.v, &b.v.Schema)
	if err != nil {
		b.v = schemas.Receipt{}
	}
	return b.loadPosition(r, b.v.At, err)
}

func (b *receiptsBatch) keep() {
	v := &b.v
	b.keepPosition()
	b.receiptID = append(b.receiptID, v.ReceiptID)
	b.kind = append(b.kind, v.Kind)
	b.deliveryID = append(b.deliveryID, v.DeliveryID)
	b.notificationID = append(b.notificationID, v.NotificationID)
	b.tenant = append(b.tenant, v.Tenant)
	b.typ = append(b.typ, v.Type)
	b.recipient = append(b.recipient, v.Recipient)
	b.deviceID = append(b.deviceID, v.DeviceID)
	b.channel = append(b.channel, v.Channel)
	b.clientAt = append(b.clientAt, ms(v.ClientAt))
}

func (b *receiptsBatch) columns() ([]string, []any) {
	names, cols := b.positionColumns()
	return append(names, "receipt_id", "kind", "delivery_id", "notification_id", "tenant", "type", "recipient", "device_id", "channel", "client_at"),
		append(cols, b.receiptID, b.kind, b.deliveryID, b.notificationID, b.tenant, b.typ, b.recipient, b.deviceID, b.channel, b.clientAt)
}

func (b *receiptsBatch) reset() { *b = receiptsBatch{position: b.position}; b.resetPosition() }
