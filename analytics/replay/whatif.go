package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/reply"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/analytics/whatif"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// WhatIfOptions configure a what-if replay (see the package doc).
type WhatIfOptions struct {
	Brokers    []string
	ClientOpts []kgo.Opt
	Catalog    *topics.Catalog
	// ClickHouse and Database, when set, give the recorded dedupe outcome
	// of every request in the window, to compare Then with.
	ClickHouse driver.Conn
	Database   string
	// Then is the policy in force (the live stages'), Now the candidate.
	Then, Now whatif.Policy
	// From starts the window; Until (zero: the log's end) ends it.
	From  From
	Until time.Time
	// Warmup is how far before From.Time reading starts (default
	// whatif.WarmupFor(Then, Now)).
	Warmup time.Duration
	// Samples is how many changed notifications to list (default 10).
	Samples  int
	Progress func(done, total int64)
	Logger   *slog.Logger
}

// WhatIfReport is what a what-if replay found.
type WhatIfReport struct {
	whatif.Report
	// Topic is the requests topic read.
	Topic string `json:"topic"`
	// Then and Now describe the two policies.
	Then  string `json:"then"`
	Now   string `json:"now"`
	From  string `json:"from"`
	Until string `json:"until"`
	// WarmupPeriod is how far before From reading started: a duration,
	// "the log start" (a From given as offsets), or "" (From is the log
	// start: nothing to warm up).
	WarmupPeriod string `json:"warmupPeriod"`
	Partitions   int    `json:"partitions"`
	// Undecodable counts request records that are not a request (the
	// stage rejects them under any policy); they are not reported.
	Undecodable int `json:"undecodable"`
}

// WhatIf reads a window of herald.requests (read_committed, with a warm-up
// before it), the recipients' devices and preferences, and, when a
// ClickHouse connection is given, the recorded dedupe outcomes, and runs
// whatif.Run over them. It writes nothing anywhere.
func WhatIf(ctx context.Context, o WhatIfOptions) (*WhatIfReport, error) {
	if len(o.Brokers) == 0 || o.Catalog == nil {
		return nil, errors.New("replay: what-if: Brokers and Catalog are required")
	}
	if o.ClickHouse != nil {
		if err := migrations.ValidDatabase(o.Database); err != nil {
			return nil, fmt.Errorf("replay: what-if: %w", err)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Warmup <= 0 {
		o.Warmup = whatif.WarmupFor(o.Then, o.Now)
	}
	requests := o.Catalog.Name(topics.Requests)
	admCl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(o.Brokers...)}, o.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("replay: what-if: kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	plans, err := plan(ctx, adm, requests, Options{From: o.From, Warmup: o.Warmup})
	if err != nil {
		return nil, err
	}
	if plans, err = until(ctx, adm, requests, plans, o.Until); err != nil {
		return nil, err
	}
	rep := &WhatIfReport{Topic: requests, Then: o.Then.String(), Now: o.Now.String(), From: o.From.String(), Until: "the log's end", WarmupPeriod: o.Warmup.String(), Partitions: len(plans)}
	if !o.Until.IsZero() {
		rep.Until = o.Until.UTC().Format(time.RFC3339)
	}
	if o.From.Start {
		rep.WarmupPeriod = ""
	} else if o.From.Time.IsZero() {
		rep.WarmupPeriod = "the log start" // see plan
	}

	dir, err := readDirectory(ctx, o, adm)
	if err != nil {
		return nil, err
	}
	m := newMeter(o.Progress, plans)
	var reqs []whatif.Request
	for _, p := range plans {
		recorded, err := recordedOutcomes(ctx, o, requests, p)
		if err != nil {
			return nil, err
		}
		err = eachRecord(ctx, o.Brokers, o.ClientOpts, o.Logger, requests, p.partition, p.readFrom, p.end, func(rec *kgo.Record) error {
			if reply.IsExplain(rec) {
				return nil // a dry run the stages answered, not a send
			}
			var r schemas.Request
			if schemas.Decode(rec.Value, &r) != nil {
				if rec.Offset >= p.compareAt {
					rep.Undecodable++
				}
				return nil
			}
			reqs = append(reqs, whatif.Request{Partition: rec.Partition, Offset: rec.Offset, At: rec.Timestamp.UnixMilli(), Request: r,
				Warmup: rec.Offset < p.compareAt, Recorded: recorded[rec.Offset]})
			return nil
		}, m.at)
		if err != nil {
			return nil, err
		}
		m.finished(p)
	}
	rep.Report = *whatif.Run(whatif.Input{Then: o.Then, Now: o.Now, Requests: reqs, Directory: dir, Samples: o.Samples})
	return rep, nil
}

// until ends every partition's plan at the first request stamped at or
// after t (zero: no change).
func until(ctx context.Context, adm *kadm.Client, topic string, plans []partitionPlan, t time.Time) ([]partitionPlan, error) {
	if t.IsZero() {
		return plans, nil
	}
	ends, err := adm.ListOffsetsAfterMilli(ctx, t.UnixMilli(), topic)
	if err != nil {
		return nil, fmt.Errorf("replay: find offsets of %s at %s: %w", topic, t.UTC().Format(time.RFC3339), err)
	}
	for i := range plans {
		p := &plans[i]
		if e, ok := ends.Lookup(topic, p.partition); ok && e.Err == nil && e.Offset >= 0 {
			p.end = min(p.end, e.Offset)
		}
		p.compareAt = min(p.compareAt, p.end)
		p.readFrom = min(p.readFrom, p.compareAt)
	}
	return plans, nil
}

// recordedOutcomes returns the audit's dedupe outcome of the window's
// requests in one partition by offset; nil without ClickHouse.
func recordedOutcomes(ctx context.Context, o WhatIfOptions, topic string, p partitionPlan) (map[int64]string, error) {
	if o.ClickHouse == nil || p.compareAt >= p.end {
		return nil, nil
	}
	var rows []struct {
		Offset  int64  `ch:"source_offset"`
		Outcome string `ch:"outcome"`
	}
	q := "SELECT source_offset, outcome FROM `" + o.Database + "`.decisions WHERE stage = 'dedupe' AND decode_error = '' " +
		"AND source_topic = ? AND source_partition = ? AND source_offset >= ? AND source_offset < ? " +
		"ORDER BY source_offset, kafka_partition, kafka_offset LIMIT 1 BY source_offset"
	if err := o.ClickHouse.Select(ctx, &rows, q, topic, p.partition, p.compareAt, p.end); err != nil {
		return nil, fmt.Errorf("replay: what-if: read recorded decisions of %s/%d: %w", topic, p.partition, err)
	}
	out := make(map[int64]string, len(rows))
	for _, r := range rows {
		out[r.Offset] = r.Outcome
	}
	return out, nil
}

// readDirectory reads herald.devices and herald.preferences whole
// (compacted: the latest of each, and what compaction has not yet removed)
// and returns every recipient's state after each change, in time order.
func readDirectory(ctx context.Context, o WhatIfOptions, adm *kadm.Client) ([]whatif.DirectoryChange, error) {
	devicesT, prefsT := o.Catalog.Name(topics.Devices), o.Catalog.Name(topics.Preferences)
	var recs []*kgo.Record
	for _, topic := range []string{devicesT, prefsT} {
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("replay: what-if: list start offsets of %s: %w", topic, err)
		}
		ends, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("replay: what-if: list end offsets of %s: %w", topic, err)
		}
		for p, e := range ends[topic] {
			if e.Err != nil {
				return nil, fmt.Errorf("replay: what-if: topic %s: %w", topic, e.Err)
			}
			s, _ := starts.Lookup(topic, p)
			err := eachRecord(ctx, o.Brokers, o.ClientOpts, o.Logger, topic, p, s.Offset, e.Offset, func(r *kgo.Record) error {
				recs = append(recs, r)
				return nil
			}, func(int64) {})
			if err != nil {
				return nil, err
			}
		}
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Timestamp.Before(recs[j].Timestamp) })
	devices := map[string]map[string]schemas.Device{}
	prefs := map[string]schemas.Preferences{}
	var out []whatif.DirectoryChange
	for _, r := range recs {
		rk, ok := applyDirectory(devices, prefs, r, r.Topic == devicesT, o.Logger)
		if !ok {
			continue
		}
		var who route.Recipient
		for _, d := range devices[rk] {
			who.Devices = append(who.Devices, d)
		}
		sort.Slice(who.Devices, func(i, j int) bool { return who.Devices[i].DeviceID < who.Devices[j].DeviceID })
		if p, ok := prefs[rk]; ok {
			who.Prefs = &p
		}
		out = append(out, whatif.DirectoryChange{At: r.Timestamp.UnixMilli(), Key: rk, Who: who})
	}
	return out, nil
}

// applyDirectory applies one device (isDevice) or preferences record as the
// route stage's table does, and returns the recipient key it changed.
func applyDirectory(devices map[string]map[string]schemas.Device, prefs map[string]schemas.Preferences, r *kgo.Record, isDevice bool, log *slog.Logger) (string, bool) {
	key := string(r.Key)
	if !isDevice {
		if r.Value == nil {
			delete(prefs, key)
			return key, true
		}
		var p schemas.Preferences
		if err := schemas.Decode(r.Value, &p); err != nil {
			log.Warn("what-if: skip undecodable preferences", "key", key, "err", err)
			return "", false
		}
		prefs[key] = p
		return key, true
	}
	rk := schemas.RecipientPrefix(key)
	if r.Value == nil {
		id, err := url.PathUnescape(key[min(len(rk)+1, len(key)):])
		if err != nil {
			return "", false
		}
		delete(devices[rk], id)
		return rk, true
	}
	var d schemas.Device
	if err := schemas.Decode(r.Value, &d); err != nil {
		log.Warn("what-if: skip undecodable device", "key", key, "err", err)
		return "", false
	}
	if devices[rk] == nil {
		devices[rk] = map[string]schemas.Device{}
	}
	devices[rk][d.DeviceID] = d
	return rk, true
}

// Print writes the report in plain words.
func (r *WhatIfReport) Print(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "What-if replay of %s from %s to %s: %d request(s) in %d partition(s)", r.Topic, r.From, r.Until, r.Requests, r.Partitions)
	if r.WarmupPeriod == "the log start" {
		fmt.Fprintf(&b, ", after a warm-up from the log start (%d request(s) read to rebuild state, not reported)", r.Warmup)
	} else if r.WarmupPeriod != "" {
		fmt.Fprintf(&b, ", after a warm-up of %s (%d request(s) read to rebuild state, not reported)", r.WarmupPeriod, r.Warmup)
	}
	if r.Undecodable > 0 {
		fmt.Fprintf(&b, "; %d undecodable record(s) left out", r.Undecodable)
	}
	b.WriteString(".\n")
	fmt.Fprintf(&b, "  then: %s\n  now:  %s\n\n", r.Then, r.Now)
	fmt.Fprintf(&b, "%d of %d request(s) would be decided differently.\n", r.Changed, r.Requests)

	if len(r.Types) > 0 {
		b.WriteString("\nBy type:\n")
	}
	for _, t := range r.Types {
		fmt.Fprintf(&b, "  %s: %d request(s), %d changed; dedup hit rate %s then, %s now", t.Type, t.Requests, t.Changed, rate(t.HitRateThen), rate(t.HitRateNow))
		if t.Recorded != nil {
			fmt.Fprintf(&b, " (recorded %s)", rate(t.HitRateRecorded))
		}
		b.WriteString("\n    ")
		for i, o := range outcomeNames(t.Then, t.Now) {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d → %d", o, t.Then[o], t.Now[o])
		}
		b.WriteString("\n")
	}
	if len(r.Reasons) > 0 {
		b.WriteString("\nBy reason:\n")
	}
	for _, rs := range r.Reasons {
		fmt.Fprintf(&b, "  %d  %s → %s: %s\n", rs.Count, rs.Then, rs.Now, rs.Words)
	}
	if len(r.Samples) > 0 {
		fmt.Fprintf(&b, "\nChanged notifications (%d of %d; see one with herald audit timeline --id <notification id>):\n", len(r.Samples), r.Changed)
	}
	for _, c := range r.Samples {
		printChange(&b, c, "then", "now")
	}
	if r.Mismatches > 0 {
		fmt.Fprintf(&b, "\nWarning: %d of %d recorded decision(s) differ from \"then\": the policy in force given here is not the live stages', "+
			"or the warm-up is too short (--warmup). herald replay lists each; for example:\n", r.Mismatches, r.Recorded)
		for _, c := range r.MismatchSamples {
			printChange(&b, c, "then", "recorded")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func printChange(b *strings.Builder, c whatif.Change, a, z string) {
	fmt.Fprintf(b, "  %s  %s to %s (tenant %s), notification %s, request %s (partition %d offset %d)\n",
		time.UnixMilli(c.At).UTC().Format(time.RFC3339), c.Type, c.Recipient, c.Tenant, c.NotificationID, c.RequestID, c.Partition, c.Offset)
	for _, x := range []struct {
		label string
		o     whatif.Outcome
	}{{a, c.Then}, {z, c.Now}} {
		fmt.Fprintf(b, "      %-10s %s", x.label+":", x.o)
		if x.o.Detail != "" {
			fmt.Fprintf(b, " (%s)", x.o.Detail)
		}
		b.WriteString("\n")
	}
}

// rate is a hit rate in per cent, or "n/a" when there was nothing to hit.
func rate(r float64) string {
	if r < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*r)
}

// outcomeNames lists the outcomes counted in either map, in the order the
// stages decide them.
func outcomeNames(a, b map[string]int) []string {
	order := []string{schemas.DecisionAccepted, schemas.DecisionDuplicate, schemas.DecisionIdempotentReplay, schemas.DecisionIdempotencyConflict,
		schemas.DecisionRejected, schemas.DecisionRateLimited, schemas.DecisionDigested, schemas.DecisionOptedOut, schemas.DecisionNoTarget,
		schemas.DecisionDeferred, schemas.DecisionRouted}
	var out []string
	for _, o := range order {
		if a[o] > 0 || b[o] > 0 {
			out = append(out, o)
		}
	}
	for _, m := range []map[string]int{a, b} {
		var rest []string
		for o, n := range m {
			if n > 0 && !slices.Contains(out, o) {
				rest = append(rest, o)
			}
		}
		sort.Strings(rest)
		out = append(out, rest...)
	}
	return out
}
