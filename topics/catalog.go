// Package topics owns herald's Kafka topic catalog: every topic's name,
// partition count, replication factor and configs, and the idempotent
// create and verify operations (kadm) that make a cluster match it.
//
// Hazards. Partition counts of keyed topics are part of herald's
// correctness: the dedupe stage's seen-set (herald.seen) is a changelog
// co-partitioned with herald.requests, devices, preferences and the
// route stage's changelog (herald.route) are co-partitioned with
// herald.accepted, and herald.completionstate with herald.completions. Those groups must keep equal partition
// counts, and a partition count must never change on a live cluster (keys
// would move to other partitions, away from their state). Verify reports
// such drift; nothing here repartitions.
package topics

import (
	"sort"
	"strconv"
)

// Channels a notification may ask for (and a recipient's preferences name):
// each has a delivery topic and a sink.
var Channels = []string{"apns", "fcm", "webpush", "feed", "email"}

// Webhook is the outbound webhooks' channel: a delivery topic and a sink
// like the others, fed by the webhook fan-out (sinks/webhook) from
// herald.outcomes, not by the route stage, and never a notification's.
const Webhook = "webhook"

// SinkChannels are every channel with a delivery topic and a sink.
var SinkChannels = append(append([]string(nil), Channels...), Webhook)

// Topic is one entry of the catalog.
type Topic struct {
	Name        string
	Partitions  int32
	Replication int16
	Configs     map[string]string
	// Doc says what the topic holds and how it is keyed.
	Doc string
}

// Options shape a catalog for one deployment.
type Options struct {
	// Prefix precedes every name; "herald." by default.
	Prefix string
	// Partitions of every topic (co-partitioned groups must match, so one
	// number serves all).
	Partitions int32
	// Replication factor of every topic.
	Replication int16
	// Retention of the event topics (requests, decisions, accepted,
	// deliveries, attempts, outcomes, dead letters). The year-long audit
	// record is ClickHouse, not Kafka.
	RetentionMs int64
	// SeenTombstoneRetentionMs keeps seen-set tombstones long enough for a
	// restoring stage to read them (delete.retention.ms).
	SeenTombstoneRetentionMs int64
	// SeenCleanupPolicy is "compact" (the default). "delete" keeps every
	// seen-set and sink state record for SeenRetentionMs instead; only for
	// clusters whose compaction is unsafe with transactions (kfake, see
	// internal/embedded). The retention must exceed the sinks' MaxAge.
	SeenCleanupPolicy string
	SeenRetentionMs   int64
	// MaxFutureTimestampMs is herald.requests' message.timestamp.after.max.ms:
	// a Kafka broker refuses a request stamped further ahead of its own
	// clock, which bounds how early a skewed producer clock can expire
	// the dedupe stage's seen entries (see processors/dedupe, "Hazard:
	// clocks"; its SkewAllowanceMs must be at least this).
	MaxFutureTimestampMs int64
	// FeedRetentionMs is how long an in-app feed item is kept (herald.feed
	// is compacted and deleted after it); 30 days by default.
	FeedRetentionMs int64
	// SegmentBytes, when positive, is every topic's segment.bytes; zero
	// leaves it to the broker (Kafka's default is 1 GiB). For brokers
	// whose default is small, such as herald's test broker (1 MiB, so that
	// tests see compaction): under load they roll the changelogs'
	// segments many times a second and compact them again and again,
	// which a benchmark would measure instead of herald.
	SegmentBytes int64
}

// DefaultMaxFutureTimestampMs is five minutes.
const DefaultMaxFutureTimestampMs = 5 * 60_000

// DefaultOptions are production defaults: 12 partitions, replication 3,
// seven days of retention.
func DefaultOptions() Options {
	return Options{
		Prefix:                   "herald.",
		Partitions:               12,
		Replication:              3,
		RetentionMs:              7 * 24 * 3600 * 1000,
		SeenTombstoneRetentionMs: 24 * 3600 * 1000,
		MaxFutureTimestampMs:     DefaultMaxFutureTimestampMs,
		FeedRetentionMs:          30 * 24 * 3600 * 1000,
	}
}

// Catalog is the full set of herald topics for one deployment.
type Catalog struct {
	opts   Options
	topics []Topic
}

// New builds the catalog; zero fields of o take DefaultOptions' values.
func New(o Options) *Catalog {
	d := DefaultOptions()
	if o.Prefix == "" {
		o.Prefix = d.Prefix
	}
	if o.Partitions <= 0 {
		o.Partitions = d.Partitions
	}
	if o.Replication <= 0 {
		o.Replication = d.Replication
	}
	if o.RetentionMs == 0 {
		o.RetentionMs = d.RetentionMs
	}
	if o.SeenTombstoneRetentionMs == 0 {
		o.SeenTombstoneRetentionMs = d.SeenTombstoneRetentionMs
	}
	if o.MaxFutureTimestampMs <= 0 {
		o.MaxFutureTimestampMs = d.MaxFutureTimestampMs
	}
	if o.FeedRetentionMs <= 0 {
		o.FeedRetentionMs = d.FeedRetentionMs
	}
	c := &Catalog{opts: o}
	events := func(name, doc string, extra ...map[string]string) {
		cfg := map[string]string{
			"cleanup.policy": "delete",
			"retention.ms":   strconv.FormatInt(o.RetentionMs, 10),
		}
		for _, m := range extra {
			for k, v := range m {
				cfg[k] = v
			}
		}
		c.add(name, doc, cfg)
	}
	compacted := func(name, doc string, extra map[string]string) {
		cfg := map[string]string{
			"cleanup.policy":            "compact",
			"min.cleanable.dirty.ratio": "0.1",
			"segment.ms":                "3600000",
		}
		for k, v := range extra {
			cfg[k] = v
		}
		c.add(name, doc, cfg)
	}
	events("requests", "producer requests, one per recipient; key: notification id; records stamped more than MaxFutureTimestampMs ahead of the broker's clock are refused",
		map[string]string{"message.timestamp.after.max.ms": strconv.FormatInt(o.MaxFutureTimestampMs, 10)})
	events("decisions", "every stage decision (accepted, duplicate, replay, conflict, limits); key: notification id")
	const seenDoc = "the dedupe stage's seen-set changelog, co-partitioned with requests; key: kind/scope; tombstone on expiry"
	if o.SeenCleanupPolicy == "delete" {
		c.add("seen", seenDoc, map[string]string{"cleanup.policy": "delete", "retention.ms": strconv.FormatInt(o.SeenRetentionMs, 10)})
	} else {
		compacted("seen", seenDoc, map[string]string{"delete.retention.ms": strconv.FormatInt(o.SeenTombstoneRetentionMs, 10)})
	}
	events("accepted", "notifications accepted by the dedupe stage; key: tenant/recipient")
	events(Replies, "answers to waiting API callers (internal/reply): a copy of each stage decision about a request whose header herald-reply-to names a partition, written to that partition in the decision's transaction; key: notification id; kept one hour, never audited",
		map[string]string{"retention.ms": "3600000"})
	// The route stage's state is written in transactions like the seen-set,
	// so it takes the seen-set's cleanup policy (kfake's defect 3).
	const routeDoc = "the route stage's state changelog (rate counters, digest buffers, deferred deliveries), co-partitioned with accepted; key: kind/tenant/recipient/...; tombstone when done"
	if o.SeenCleanupPolicy == "delete" {
		c.add("route", routeDoc, map[string]string{"cleanup.policy": "delete", "retention.ms": strconv.FormatInt(o.SeenRetentionMs, 10)})
	} else {
		compacted("route", routeDoc, map[string]string{"delete.retention.ms": strconv.FormatInt(o.SeenTombstoneRetentionMs, 10)})
	}
	for _, ch := range SinkChannels {
		events("deliveries."+ch, "delivery commands for the "+ch+" sink; key: delivery id")
	}
	for _, ch := range SinkChannels {
		doc := "the " + ch + " sink's state: sent-set, write-ahead intents, parked retries; key: delivery id, co-partitioned with deliveries." + ch
		if o.SeenCleanupPolicy == "delete" { // the same hazard as the seen-set's, the same workaround
			c.add(SinkState(ch), doc, map[string]string{"cleanup.policy": "delete", "retention.ms": strconv.FormatInt(o.SeenRetentionMs, 10)})
		} else {
			compacted(SinkState(ch), doc, nil)
		}
	}
	events("attempts", "every provider call and its classified result; key: delivery id")
	events("outcomes", "the final state of every delivery; key: delivery id")
	events("receipts", "what devices report about notifications (displayed, opened, a repeat dropped by the web client's seen-set), written by the API (POST /v1/receipts); key: delivery id")
	events("deadletters", "what can never be processed: delivery commands whose retries are exhausted (key: delivery id), a stage's input records whose outputs can never be written, and timers' outputs that can never be written (a stage.DeadLetter with header herald-dead-letter-stage; key: the input's or the output's key); and the markers of redrives (header herald-redriven: the dead letter's id; sinks/deadletters)")
	compacted("devices", "registered devices; key: tenant/recipient/device, partitioned by tenant/recipient", nil)
	compacted("preferences", "per-user channel preferences and quiet hours; key: tenant/recipient", nil)
	compacted(Webhooks, "tenants' outbound webhook endpoints (url, secret, events); key: tenant/id", nil)
	events(Completions, "what the webhook completion stage reads: the route stage's decisions and the outcomes of the notifications of tenants with a send.completed endpoint, forwarded by sinks/webhook; key: notification id")
	// Written in transactions like the seen-set: the same cleanup policy.
	const completionDoc = "the webhook completion stage's state (the open deliveries of each notification), co-partitioned with completions; key: notification id; tombstone when its send.completed is written"
	if o.SeenCleanupPolicy == "delete" {
		c.add(CompletionState, completionDoc, map[string]string{"cleanup.policy": "delete", "retention.ms": strconv.FormatInt(o.SeenRetentionMs, 10)})
	} else {
		compacted(CompletionState, completionDoc, nil)
	}
	events(Fallback, "what the fallback stage reads (processors/fallback): the route stage's fallback plans, and the outcomes and receipts of notifications of types with a fallback chain, forwarded; key: notification id")
	// Written in transactions like the seen-set: the same cleanup policy.
	const fallbackDoc = "the fallback stage's state (each notification's chain, its timers and the outcomes and receipts read), co-partitioned with fallback; key: notification id; tombstone when it expires"
	if o.SeenCleanupPolicy == "delete" {
		c.add(FallbackState, fallbackDoc, map[string]string{"cleanup.policy": "delete", "retention.ms": strconv.FormatInt(o.SeenRetentionMs, 10)})
	} else {
		compacted(FallbackState, fallbackDoc, nil)
	}
	compacted("segments", "tenant-defined named sets of users (target kind segment); key: tenant/name", nil)
	// The feed is written in transactions (the feed sink's, the API's read
	// marks), so it takes the seen-set's cleanup policy (kfake's defect 3).
	const feedDoc = "the in-app feed: one item per notification and recipient, written by the feed sink, read marks by the API; key: tenant/recipient/notification; kept FeedRetentionMs"
	if o.SeenCleanupPolicy == "delete" {
		c.add(Feed, feedDoc, map[string]string{"cleanup.policy": "delete", "retention.ms": strconv.FormatInt(o.FeedRetentionMs, 10)})
	} else {
		compacted(Feed, feedDoc, map[string]string{"cleanup.policy": "compact,delete", "retention.ms": strconv.FormatInt(o.FeedRetentionMs, 10)})
	}
	return c
}

func (c *Catalog) add(short, doc string, configs map[string]string) {
	if c.opts.SegmentBytes > 0 {
		configs["segment.bytes"] = strconv.FormatInt(c.opts.SegmentBytes, 10)
	}
	c.topics = append(c.topics, Topic{
		Name:        c.opts.Prefix + short,
		Partitions:  c.opts.Partitions,
		Replication: c.opts.Replication,
		Configs:     configs,
		Doc:         doc,
	})
}

// Options returns the options the catalog was built with, defaults applied.
func (c *Catalog) Options() Options { return c.opts }

// Topics returns every topic, sorted by name.
func (c *Catalog) Topics() []Topic {
	out := append([]Topic(nil), c.topics...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the full name of every topic, sorted.
func (c *Catalog) Names() []string {
	var names []string
	for _, t := range c.Topics() {
		names = append(names, t.Name)
	}
	return names
}

// Name returns the full name of a topic given its short name ("requests",
// "deliveries.apns").
func (c *Catalog) Name(short string) string { return c.opts.Prefix + short }

// Well-known short names.
const (
	Requests    = "requests"
	Decisions   = "decisions"
	Seen        = "seen"
	Accepted    = "accepted"
	Replies     = "replies"
	Route       = "route"
	Attempts    = "attempts"
	Outcomes    = "outcomes"
	DeadLetters = "deadletters"
	Devices     = "devices"
	Feed        = "feed"
	Receipts    = "receipts"
	Preferences = "preferences"
	Segments    = "segments"
	Webhooks    = "webhooks"
	// Completions and CompletionState: the webhook completion stage's
	// input and changelog (sinks/webhook).
	Completions     = "completions"
	CompletionState = "completionstate"
	// Fallback and FallbackState: the fallback stage's input and changelog
	// (processors/fallback).
	Fallback      = "fallback"
	FallbackState = "fallbackstate"
)

// Deliveries is the short name of a channel's delivery topic.
func Deliveries(channel string) string { return "deliveries." + channel }

// SinkState is the short name of a channel's sink state changelog.
func SinkState(channel string) string { return "sinkstate." + channel }
