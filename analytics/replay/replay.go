// Package replay owns `herald replay`: it re-runs herald.requests through the
// dedupe stage's own code (processors/dedupe Task, the function the live
// stage runs) in a sandbox, and compares every decision it makes with the
// decision the audit record holds for the same request.
//
// The sandbox reads Kafka and ClickHouse and writes nothing: the task's
// outputs (decisions, seen-set changes, accepted notifications) stay in
// memory, nothing is produced to any topic and nothing is sent.
//
// Decisions depend on the seen-set, so a replay that starts in the middle of
// the log first rebuilds it: it reads from Warmup before the requested start
// (by default the longest dedupe window or idempotency TTL of the policy)
// and compares only from the start on. A request whose own dedupeWindowMs or
// idempotencyTtlMs exceeds the warm-up may then differ; replay from the log
// start to rule that out. A start given as offsets warms up from the log
// start.
//
// The replay must use the live stage's policy (windows and TTLs): a
// different policy shows up as differences.
//
// What-if (WhatIf, `herald replay --what-if`). To tune a window or a limit
// before changing it, an analyst re-runs a window of herald.requests
// (--from, --until) under the policy in force (the usual policy flags,
// the live stages') and under a candidate: the same flags with the prefix
// what-if- (--what-if-dedupe-window 1m, --what-if-rate-limits
// 'chat=5/1h', none to empty a list), or a --what-if-config file of
// unprefixed policy settings; an unset candidate setting is as in force.
// Both run through the dedupe stage's Decide and the route stage's Task
// (rate limits, digests, preferences, quiet hours, fan-out) in memory:
// nothing is produced to any topic, nothing is written to ClickHouse. The
// report counts, per type and per reason, the requests decided differently
// (duplicates the candidate would catch or let through, notifications it
// would rate-limit, digest or defer), the dedup hit rate per type under
// each policy and as recorded, and lists changed notifications with both
// decisions, each to look up with `herald audit timeline --id`. The
// warm-up is the longest window, TTL, rate or digest window of either
// policy (--warmup overrides it): requests read in it build state under
// each policy and are not reported. With a ClickHouse address, the recorded
// outcome of each request is read too; a "then" that differs from the
// record is reported as a warning (the flags are not the live policy, or
// the warm-up is too short). The semantics and hazards are in
// analytics/whatif's package doc.
package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// From is where the comparison starts: the log start, a time, or offsets.
type From struct {
	Start bool
	Time  time.Time
	// Offsets per partition; a partition not listed starts at Offset when
	// AllPartitions is set, else at the log start.
	Offsets       map[int32]int64
	Offset        int64
	AllPartitions bool
}

func (f From) String() string {
	switch {
	case f.Start:
		return "the log start"
	case !f.Time.IsZero():
		return f.Time.UTC().Format(time.RFC3339)
	case f.AllPartitions:
		return fmt.Sprintf("offset %d of every partition", f.Offset)
	default:
		ps := make([]int32, 0, len(f.Offsets))
		for p := range f.Offsets {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		parts := make([]string, len(ps))
		for i, p := range ps {
			parts[i] = fmt.Sprintf("%d=%d", p, f.Offsets[p])
		}
		return "offsets " + strings.Join(parts, ",")
	}
}

// ParseFrom reads a --from value:
//
//	start                      the log start
//	2026-11-30T08:00:00Z       a time (RFC 3339; also "2026-11-30 08:00:00" and "2026-11-30", UTC)
//	-24h or 24h                that long before now
//	offset:1500                that offset of every partition
//	offset:0=1500,3=220        those offsets (other partitions: the log start)
func ParseFrom(s string, now time.Time) (From, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "" || s == "start" || s == "beginning":
		return From{Start: true}, nil
	case strings.HasPrefix(s, "offset:"):
		spec := strings.TrimPrefix(s, "offset:")
		if !strings.Contains(spec, "=") {
			n, err := strconv.ParseInt(spec, 10, 64)
			if err != nil || n < 0 {
				return From{}, fmt.Errorf("replay: --from %q: want offset:N or offset:P=N,P=N", s)
			}
			return From{Offset: n, AllPartitions: true}, nil
		}
		f := From{Offsets: map[int32]int64{}}
		for kv := range strings.SplitSeq(spec, ",") {
			ps, ns, ok := strings.Cut(strings.TrimSpace(kv), "=")
			p, err1 := strconv.ParseInt(ps, 10, 32)
			n, err2 := strconv.ParseInt(ns, 10, 64)
			if !ok || err1 != nil || err2 != nil || p < 0 || n < 0 {
				return From{}, fmt.Errorf("replay: --from %q: %q is not partition=offset", s, kv)
			}
			f.Offsets[int32(p)] = n
		}
		return f, nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "-")); err == nil && d > 0 {
		return From{Time: now.Add(-d)}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, time.DateTime, time.DateOnly} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return From{Time: t}, nil
		}
	}
	return From{}, fmt.Errorf("replay: --from %q: want start, a time (RFC 3339), a duration ago (24h) or offset:N", s)
}

// Options configure a replay.
type Options struct {
	Brokers []string
	Catalog *topics.Catalog
	// ClickHouse and Database hold the audit record to compare with.
	ClickHouse driver.Conn
	Database   string
	// Policy must be the live stage's.
	Policy dedupe.Policy
	From   From
	// Warmup is how far before From.Time reading starts (by default the
	// longest window or TTL of Policy).
	Warmup time.Duration
	// Progress, if set, is called as records are read with the records
	// read so far and the total to read.
	Progress   func(done, total int64)
	ClientOpts []kgo.Opt
	Logger     *slog.Logger
}

// Report is the result of a replay.
type Report struct {
	From       From
	Partitions int
	// Read counts requests read (warm-up included); Compared those whose
	// decision was compared with the audit.
	Read, Compared int64
	Differences    []Difference
}

// Difference is one decision on which the replay and the audit disagree.
type Difference struct {
	Partition      int32
	Offset         int64 // of the request
	DecisionID     string
	NotificationID string
	// Kind is "changed", "missing from the audit" or "not made by the
	// replay" (the audit holds a decision the replay did not make, or one
	// too many).
	Kind   string
	Fields []FieldDiff
}

// FieldDiff is one field that differs.
type FieldDiff struct {
	Field, Audit, Replay string
}

func (d Difference) String() string {
	s := fmt.Sprintf("partition %d offset %d (decision %s, notification %s): %s", d.Partition, d.Offset, d.DecisionID, d.NotificationID, d.Kind)
	for i, f := range d.Fields {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		s += fmt.Sprintf("%s%s audit=%q replay=%q", sep, f.Field, f.Audit, f.Replay)
	}
	return s
}

// sandbox topic names: the task's outputs are only ever held in memory, and
// these names make sure they could never be mistaken for live ones.
var sandboxTopics = dedupe.Topics{
	Decisions: "herald-replay-sandbox.decisions",
	Seen:      "herald-replay-sandbox.seen",
	Accepted:  "herald-replay-sandbox.accepted",
}

// partitionPlan is what one partition's replay reads and compares.
type partitionPlan struct {
	partition           int32
	readFrom, compareAt int64
	end                 int64 // last stable offset: read [readFrom, end)
}

// Run replays and compares.
func Run(ctx context.Context, o Options) (*Report, error) {
	if len(o.Brokers) == 0 || o.Catalog == nil || o.ClickHouse == nil {
		return nil, errors.New("replay: Brokers, Catalog and ClickHouse are required")
	}
	if err := migrations.ValidDatabase(o.Database); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Warmup <= 0 {
		o.Warmup = longestWindow(o.Policy)
	}
	requests := o.Catalog.Name(topics.Requests)
	admCl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(o.Brokers...)}, o.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("replay: kafka client: %w", err)
	}
	defer admCl.Close()
	plans, err := plan(ctx, kadm.NewClient(admCl), requests, o)
	if err != nil {
		return nil, err
	}
	rep := &Report{From: o.From, Partitions: len(plans)}
	m := newMeter(o.Progress, plans)
	for _, p := range plans {
		if err := replayPartition(ctx, o, requests, p, rep, m.at); err != nil {
			return rep, err
		}
		m.finished(p)
	}
	return rep, nil
}

// meter reports a run's progress over its partition plans: the offsets of
// the plans finished plus those done in the current one, of the total.
type meter struct {
	report      func(done, total int64) // nil: nothing to report
	done, total int64
}

// newMeter reports 0 done of the plans' offsets.
func newMeter(report func(done, total int64), plans []partitionPlan) *meter {
	m := &meter{report: report}
	for _, p := range plans {
		m.total += p.end - p.readFrom
	}
	m.at(0)
	return m
}

// at reports offsetsDone in the current plan.
func (m *meter) at(offsetsDone int64) {
	if m.report != nil {
		m.report(m.done+offsetsDone, m.total)
	}
}

// finished counts plan p as done.
func (m *meter) finished(p partitionPlan) {
	m.done += p.end - p.readFrom
	m.at(0)
}

func longestWindow(p dedupe.Policy) time.Duration {
	ms := max(p.DefaultWindowMs, p.IdempotencyTTLMs)
	for _, w := range p.TypeWindowMs {
		ms = max(ms, w)
	}
	return time.Duration(ms) * time.Millisecond
}

// plan finds, per partition, where to start reading, where to start
// comparing and where to stop.
func plan(ctx context.Context, adm *kadm.Client, topic string, o Options) ([]partitionPlan, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("replay: list start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("replay: list end offsets of %s: %w", topic, err)
	}
	var compareAt, readAt kadm.ListedOffsets
	if !o.From.Time.IsZero() {
		if compareAt, err = adm.ListOffsetsAfterMilli(ctx, o.From.Time.UnixMilli(), topic); err != nil {
			return nil, fmt.Errorf("replay: find offsets of %s at %s: %w", topic, o.From, err)
		}
		if readAt, err = adm.ListOffsetsAfterMilli(ctx, o.From.Time.Add(-o.Warmup).UnixMilli(), topic); err != nil {
			return nil, fmt.Errorf("replay: find offsets of %s at %s: %w", topic, o.From, err)
		}
	}
	var plans []partitionPlan
	for p, e := range ends[topic] {
		if p < 0 || e.Err != nil {
			return nil, fmt.Errorf("replay: topic %s: %v", topic, e.Err)
		}
		s, _ := starts.Lookup(topic, p)
		pl := partitionPlan{partition: p, readFrom: s.Offset, compareAt: s.Offset, end: e.Offset}
		switch {
		case !o.From.Time.IsZero():
			c, _ := compareAt.Lookup(topic, p)
			r, _ := readAt.Lookup(topic, p)
			pl.compareAt, pl.readFrom = c.Offset, r.Offset
		case o.From.AllPartitions:
			pl.compareAt = o.From.Offset
		case o.From.Offsets != nil:
			if off, ok := o.From.Offsets[p]; ok {
				pl.compareAt = off
			}
		}
		// Offsets below the log start were deleted by retention; offsets at
		// -1 mean "no record after that time".
		if pl.readFrom < s.Offset {
			pl.readFrom = s.Offset
		}
		if pl.compareAt < 0 || pl.compareAt > pl.end {
			pl.compareAt = pl.end
		}
		pl.compareAt = max(pl.compareAt, pl.readFrom)
		pl.readFrom = min(pl.readFrom, pl.compareAt)
		plans = append(plans, pl)
	}
	sort.Slice(plans, func(i, j int) bool { return plans[i].partition < plans[j].partition })
	if len(plans) == 0 {
		return nil, fmt.Errorf("replay: topic %s not found", topic)
	}
	return plans, nil
}

// replayPartition runs one partition's requests through a fresh task and
// merges its decisions with the audit's, both in request offset order.
func replayPartition(ctx context.Context, o Options, topic string, p partitionPlan, rep *Report, progress func(int64)) error {
	if p.readFrom >= p.end {
		return nil
	}
	log := o.Logger.With("partition", p.partition)
	log.Debug("replaying partition", "read_from", p.readFrom, "compare_from", p.compareAt, "end", p.end)
	audit := &auditCursor{conn: o.ClickHouse, db: o.Database, topic: topic, partition: p.partition, next: p.compareAt, end: p.end}
	task := dedupe.NewTask(o.Policy, dedupe.Topics{Requests: topic, Decisions: sandboxTopics.Decisions, Seen: sandboxTopics.Seen, Accepted: sandboxTopics.Accepted}, p.partition)
	err := eachRecord(ctx, o.Brokers, o.ClientOpts, log, topic, p.partition, p.readFrom, p.end, func(rec *kgo.Record) error {
		rep.Read++
		var out stage.Out
		if err := task.Process(rec, &out); err != nil {
			return fmt.Errorf("replay: process %s/%d@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
		if rec.Offset >= p.compareAt {
			if err := compare(ctx, rec, out.Records(), audit, rep); err != nil {
				return err
			}
		}
		task.Commit() // after compare: from here the task reuses the outputs' memory
		return nil
	}, progress)
	if err != nil {
		return err
	}
	return audit.finish(ctx, rep)
}

// eachRecord reads offsets [from, end) of one partition, read_committed,
// and calls fn with every record that is not a control record, in offset
// order, and progress with the offsets done. It returns at the end, or
// when nothing more comes before it (the rest of the range holds only
// records of aborted transactions).
func eachRecord(ctx context.Context, brokers []string, clientOpts []kgo.Opt, log *slog.Logger, topic string, partition int32, from, end int64,
	fn func(*kgo.Record) error, progress func(int64)) error {
	if from >= end {
		return nil
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records show where the log ends when it ends with a
		// transaction marker.
		kgo.KeepControlRecords(),
	}
	cl, err := kgo.NewClient(append(opts, clientOpts...)...)
	if err != nil {
		return fmt.Errorf("replay: kafka client: %w", err)
	}
	defer cl.Close()

	for idle := 0; ; {
		pollCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fetches := cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fetches.NumRecords() == 0 {
			if idle++; idle >= 3 {
				log.Warn("no more records before the end offset; stopping", "topic", topic, "partition", partition, "end", end)
				return nil
			}
		} else {
			idle = 0
		}
		var ferr error
		fetches.EachError(func(t string, part int32, err error) {
			if ferr == nil && !errors.Is(err, context.DeadlineExceeded) {
				ferr = fmt.Errorf("replay: fetch %s/%d: %w", t, part, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		for _, rec := range fetches.Records() {
			if rec.Offset >= end {
				return nil
			}
			if !rec.Attrs.IsControl() {
				if err := fn(rec); err != nil {
					return err
				}
			}
			progress(rec.Offset + 1 - from)
			if rec.Offset >= end-1 {
				return nil
			}
		}
	}
}

// compare checks the decision the replay made for rec against the audit.
func compare(ctx context.Context, rec *kgo.Record, out []*kgo.Record, audit *auditCursor, rep *Report) error {
	var got *schemas.Decision
	for _, r := range out {
		if r.Topic != sandboxTopics.Decisions {
			continue
		}
		var d schemas.Decision
		if err := schemas.Decode(r.Value, &d); err != nil {
			return fmt.Errorf("replay: decode the replay's own decision: %w", err)
		}
		got = &d
	}
	rep.Compared++
	// Audit decisions of earlier requests that the replay did not make.
	for {
		row, ok, err := audit.peek(ctx)
		if err != nil {
			return err
		}
		if !ok || row.SourceOffset >= rec.Offset {
			break
		}
		audit.pop()
		rep.Differences = append(rep.Differences, Difference{Partition: rec.Partition, Offset: row.SourceOffset,
			DecisionID: row.DecisionID, NotificationID: row.NotificationID, Kind: "not made by the replay"})
	}
	var matched bool
	for {
		row, ok, err := audit.peek(ctx)
		if err != nil {
			return err
		}
		if !ok || row.SourceOffset != rec.Offset {
			break
		}
		audit.pop()
		if got == nil || matched {
			// The replay made no decision, or the audit holds a second one.
			rep.Differences = append(rep.Differences, Difference{Partition: rec.Partition, Offset: rec.Offset,
				DecisionID: row.DecisionID, NotificationID: row.NotificationID, Kind: "not made by the replay"})
			continue
		}
		matched = true
		if fields := diff(row, *got); len(fields) > 0 {
			rep.Differences = append(rep.Differences, Difference{Partition: rec.Partition, Offset: rec.Offset,
				DecisionID: got.DecisionID, NotificationID: got.NotificationID, Kind: "changed", Fields: fields})
		}
	}
	if got != nil && !matched {
		rep.Differences = append(rep.Differences, Difference{Partition: rec.Partition, Offset: rec.Offset,
			DecisionID: got.DecisionID, NotificationID: got.NotificationID, Kind: "missing from the audit"})
	}
	return nil
}

// auditRow is a dedupe decision as the audit holds it.
type auditRow struct {
	SourceOffset           int64  `ch:"source_offset"`
	DecisionID             string `ch:"decision_id"`
	Stage                  string `ch:"stage"`
	Outcome                string `ch:"outcome"`
	Detail                 string `ch:"detail"`
	RequestID              string `ch:"request_id"`
	Tenant                 string `ch:"tenant"`
	Type                   string `ch:"type"`
	Recipient              string `ch:"recipient"`
	NotificationID         string `ch:"notification_id"`
	DedupeKey              string `ch:"dedupe_key"`
	IdempotencyKey         string `ch:"idempotency_key"`
	Producer               string `ch:"producer"`
	Channel                string `ch:"channel"`
	OriginalRequestID      string `ch:"original_request_id"`
	OriginalNotificationID string `ch:"original_notification_id"`
	OriginalAt             int64  `ch:"original_at_ms"`
	OriginalOutcome        string `ch:"original_outcome"`
	At                     int64  `ch:"at_ms"`
}

func diff(a auditRow, r schemas.Decision) []FieldDiff {
	var out []FieldDiff
	check := func(field, audit, replay string) {
		if audit != replay {
			out = append(out, FieldDiff{field, audit, replay})
		}
	}
	num := func(v int64) string { return strconv.FormatInt(v, 10) }
	check("decision_id", a.DecisionID, r.DecisionID)
	check("stage", a.Stage, r.Stage)
	check("outcome", a.Outcome, r.Outcome)
	check("detail", a.Detail, r.Detail)
	check("request_id", a.RequestID, r.RequestID)
	check("tenant", a.Tenant, r.Tenant)
	check("type", a.Type, r.Type)
	check("recipient", a.Recipient, r.Recipient)
	check("notification_id", a.NotificationID, r.NotificationID)
	check("dedupe_key", a.DedupeKey, r.DedupeKey)
	check("idempotency_key", a.IdempotencyKey, r.IdempotencyKey)
	check("producer", a.Producer, r.Producer)
	check("channel", a.Channel, r.Channel)
	check("original_request_id", a.OriginalRequestID, r.OriginalRequestID)
	check("original_notification_id", a.OriginalNotificationID, r.OriginalNotificationID)
	check("original_at", num(a.OriginalAt), num(max(r.OriginalAt, 0)))
	check("original_outcome", a.OriginalOutcome, r.OriginalOutcome)
	check("at", num(a.At), num(r.At))
	return out
}

// auditCursor reads one partition's dedupe decisions from the audit in
// request offset order, a chunk of offsets at a time.
type auditCursor struct {
	conn      driver.Conn
	db, topic string
	partition int32
	next, end int64 // offsets still to fetch: [next, end)
	buf       []auditRow
}

const auditChunk = 20_000

func (c *auditCursor) peek(ctx context.Context) (auditRow, bool, error) {
	for len(c.buf) == 0 && c.next < c.end {
		hi := min(c.next+auditChunk, c.end)
		q := "SELECT source_offset, decision_id, stage, outcome, detail, request_id, tenant, type, recipient, notification_id, " +
			"dedupe_key, idempotency_key, producer, channel, original_request_id, original_notification_id, " +
			"toUnixTimestamp64Milli(original_at) AS original_at_ms, original_outcome, toUnixTimestamp64Milli(at) AS at_ms " +
			"FROM `" + c.db + "`.decisions WHERE stage = 'dedupe' AND decode_error = '' AND source_topic = ? AND source_partition = ? " +
			"AND source_offset >= ? AND source_offset < ? " +
			"ORDER BY source_offset, kafka_partition, kafka_offset LIMIT 1 BY kafka_topic, kafka_partition, kafka_offset"
		if err := c.conn.Select(ctx, &c.buf, q, c.topic, c.partition, c.next, hi); err != nil {
			return auditRow{}, false, fmt.Errorf("replay: read audit decisions of %s/%d: %w", c.topic, c.partition, err)
		}
		c.next = hi
	}
	if len(c.buf) == 0 {
		return auditRow{}, false, nil
	}
	return c.buf[0], true, nil
}

func (c *auditCursor) pop() { c.buf = c.buf[1:] }

// finish reports the audit decisions left after the last request read.
func (c *auditCursor) finish(ctx context.Context, rep *Report) error {
	for {
		row, ok, err := c.peek(ctx)
		if err != nil || !ok {
			return err
		}
		c.pop()
		rep.Differences = append(rep.Differences, Difference{Partition: c.partition, Offset: row.SourceOffset,
			DecisionID: row.DecisionID, NotificationID: row.NotificationID, Kind: "not made by the replay"})
	}
}
