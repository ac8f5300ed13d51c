package sinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// Class is what one provider call amounted to.
type Class uint8

// Classes of a call's result.
const (
	Success Class = iota + 1
	Retryable
	Permanent
	Ambiguous
)

// String is the Attempt.Result name of c.
func (c Class) String() string {
	switch c {
	case Success:
		return schemas.AttemptSent
	case Retryable:
		return schemas.AttemptRetryable
	case Permanent:
		return schemas.AttemptPermanent
	case Ambiguous:
		return schemas.AttemptAmbiguous
	}
	return "unknown"
}

// Result is one provider call's classified result.
type Result struct {
	Class Class
	// Rule names the row of the adapter's classification table that
	// matched ("unregistered", "timeout_after_write"): Attempt.Classification.
	Rule string
	// Status and Reason are the provider's HTTP status and reason code
	// (empty for a transport error).
	Status int
	Reason string
	// MessageID is the provider's id for the message, when it returns one.
	MessageID string
	// RetryAfter is the provider's Retry-After, 0 if none.
	RetryAfter time.Duration
	// RetireDevice marks a permanent error that invalidates the device's
	// token: the device is retired.
	RetireDevice bool
	// Err is the transport error, for logs (never secrets).
	Err error
}

// Provider is one channel's adapter: one call, classified. Send must use
// only the command's ids (CollapseID, APNsID, Topic, NotificationID) so a
// retry is identical to the first attempt, must return when ctx is done,
// and is called from many goroutines at once.
type Provider interface {
	Send(ctx context.Context, cmd *schemas.DeliveryCommand) Result
}

// Writer is a channel whose delivery is a write to Kafka, not a call (the
// in-app feed): when the Provider is also a Writer, the runtime never calls
// Send. It emits Records in the very transaction that consumes the command,
// with the delivery's Attempt (sent, attempt 1, rule "written"), its
// delivered Outcome and its final sink state: exactly once, by the
// transaction. An error fails the delivery (permanent, dead-lettered).
type Writer interface {
	Records(cmd *schemas.DeliveryCommand, now time.Time) ([]*kgo.Record, error)
}

// Retirer is a Provider whose invalidated target is not a herald.devices
// entry (a webhook endpoint): on an outcome device_retired the runtime
// emits Retire's records, in the outcome's transaction, in place of the
// device update.
type Retirer interface {
	Retire(cmd *schemas.DeliveryCommand, reason string, now time.Time) []*kgo.Record
}

// Policy bounds retries.
type Policy struct {
	// MaxAttempts is the most calls per delivery (8 by default); then the
	// delivery fails and is dead-lettered.
	MaxAttempts int
	// Backoff spaces retries (1 s … 5 min by default).
	Backoff backoff.Policy
	// MaxAge is the expiry of a command without ExpiresAt, after its
	// CreatedAt (24 h by default).
	MaxAge time.Duration
	// KeepFinal is how long a final delivery stays in the sent-set after
	// its expiry (1 h by default); then it is pruned (a tombstone on the
	// state topic), and a repeat of its command ends as expired, unsent.
	KeepFinal time.Duration
}

func (p *Policy) defaults() {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 8
	}
	if p.Backoff.Min <= 0 {
		p.Backoff.Min = time.Second
	}
	if p.Backoff.Max <= 0 {
		p.Backoff.Max = 5 * time.Minute
	}
	if p.MaxAge <= 0 {
		p.MaxAge = 24 * time.Hour
	}
	if p.KeepFinal <= 0 {
		p.KeepFinal = time.Hour
	}
}

// Options configure one sink instance.
type Options struct {
	// The runtime's settings: Group is "herald-sink-<channel>" by default,
	// MaxBatchRecords twice MaxInFlight; size RebalanceTimeout above the
	// longest restore of a sink state partition. ResetOffsets "" refuses
	// to start when the group's offsets were lost: replaying deliveries is
	// safe (the sent-set skips what is final) but it is the operator's call.
	stage.Instance
	Channel  string
	Provider Provider
	Catalog  *topics.Catalog
	Policy   Policy
	// MaxInFlight bounds concurrent provider calls (1000 by default).
	MaxInFlight int
	// CallTimeout bounds one provider call (10 s by default).
	CallTimeout time.Duration
	// Now is the clock (time.Now by default).
	Now func() time.Time
	// RecordFormat is how the sink writes its decisions (a delivery not sent
	// again): schemas.FormatBinary (the zero value, herald.decision/v2) or
	// schemas.FormatJSON (v1, while a reader of an earlier herald that
	// reads only JSON still runs).
	RecordFormat schemas.Format
}

// Topics are the topics a sink reads and writes.
type Topics struct {
	Deliveries, State, Attempts, Outcomes, DeadLetters, Devices, Decisions string
}

// TopicsOf returns the channel's sink topics in a catalog.
func TopicsOf(c *topics.Catalog, channel string) Topics {
	return Topics{
		Deliveries:  c.Name(topics.Deliveries(channel)),
		State:       c.Name(topics.SinkState(channel)),
		Attempts:    c.Name(topics.Attempts),
		Outcomes:    c.Name(topics.Outcomes),
		DeadLetters: c.Name(topics.DeadLetters),
		Devices:     c.Name(topics.Devices),
		Decisions:   c.Name(topics.Decisions),
	}
}

// runtime is what every partition's task of one sink instance shares, and
// the provider calls made after each commit.
type runtime struct {
	channel     string
	provider    Provider
	topics      Topics
	policy      Policy
	maxInFlight int
	callTimeout time.Duration
	now         func() time.Time
	format      schemas.Format // of decisions
	log         *slog.Logger

	// devices is herald.devices as the route stage reads it (route.Table);
	// nil when the channel retires no device.
	devices directory

	mu    sync.Mutex
	tasks map[int32]*task
	// resultsRound is set while the runtime's follow-up transaction (the
	// results of the calls just made) is being built: its Tick starts no
	// new calls.
	resultsRound bool

	calls, duplicates, outcomes *metrics.Counter
	byClass                     map[Class]*metrics.Counter
	inFlight                    *metrics.Gauge
	metrics                     *metrics.Registry
	// rules bounds the rule label of herald_sink_attempts_total.
	rules *metrics.Limit
}

// parked exports partition p's committed parked deliveries (waiting for a
// retry or their not-before time) and the age, since its creation, of the
// oldest of them (0 when none). A partition revoked loses both series
// (forgetParked) until it is assigned again.
func (rt *runtime) parked(p int32, n int, oldestAgeMs int64) {
	part := strconv.Itoa(int(p))
	rt.metrics.Gauge(parkedName, "deliveries waiting for a retry or their not-before time", "channel", rt.channel, "partition", part).Set(int64(n))
	rt.metrics.Gauge(parkedAgeName, "age since creation of the oldest parked delivery", "channel", rt.channel, "partition", part).
		SetFloat(float64(oldestAgeMs) / 1000)
}

const (
	parkedName    = "herald_sink_parked_deliveries"
	parkedAgeName = "herald_sink_parked_oldest_age_seconds"
)

func (rt *runtime) forgetParked(p int32) {
	part := strconv.Itoa(int(p))
	rt.metrics.Forget(parkedName, "channel", rt.channel, "partition", part)
	rt.metrics.Forget(parkedAgeName, "channel", rt.channel, "partition", part)
}

// directory is what a sink reads of herald.devices: route.Table.
type directory interface {
	SyncAll(ctx context.Context) error
	Recipient(tenant, recipient string) route.Recipient
}

// Sink is one sink instance: the stage runner and, for a channel whose
// token errors retire devices, the table of herald.devices it checks a
// retirement against (route.Table, the route stage's own).
type Sink struct {
	runner *stage.Runner
	table  *route.Table // nil when the channel retires no device
	synced atomic.Bool
}

// New builds one sink instance on the stage runtime.
func New(o Options) (*Sink, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	rt := newRuntime(o)
	r, err := stage.New(o.stageConfig(rt))
	if err != nil {
		return nil, err
	}
	s := &Sink{runner: r}
	_, writer := o.Provider.(Writer)
	_, retirer := o.Provider.(Retirer)
	if !writer && !retirer {
		s.table, err = route.NewTable(rt.topics.Devices, o.Catalog.Name(topics.Preferences), o.Logger,
			append([]kgo.Opt{kgo.SeedBrokers(o.Brokers...)}, o.ClientOpts...)...)
		if err != nil {
			return nil, fmt.Errorf("sinks: devices table: %w", err)
		}
		rt.devices = s.table
	}
	return s, nil
}

// Ready reports whether the devices table has caught up and the runner is
// ready (stage.Runner.Ready).
func (s *Sink) Ready() bool { return (s.table == nil || s.synced.Load()) && s.runner.Ready() }

// Warnings are the runner's readiness warnings (stage.Runner.Warnings).
func (s *Sink) Warnings() []string { return s.runner.Warnings() }

// Run reads herald.devices to its end (when the channel retires devices),
// then runs the stage until ctx is done.
func (s *Sink) Run(ctx context.Context) error {
	if s.table == nil {
		return s.runner.Run(ctx)
	}
	return s.table.RunWith(ctx, func() { s.synced.Store(true) }, s.runner.Run)
}

// defaults checks the required options and fills in the others.
func (o *Options) defaults() error {
	if o.Channel == "" || o.Provider == nil || o.Catalog == nil || o.InstanceID == "" {
		return errors.New("sinks: Channel, Provider, Catalog and InstanceID are required")
	}
	if o.Group == "" {
		o.Group = "herald-sink-" + o.Channel
	}
	o.Policy.defaults()
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 1000
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 10 * time.Second
	}
	if o.MaxBatchRecords <= 0 {
		o.MaxBatchRecords = 2 * o.MaxInFlight
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = metrics.Default
	}
	return nil
}

// stageConfig is the stage a sink runs as: one group per channel, a
// transactional id per instance of it (a static member, so a restart takes
// its partitions back), its state restored from the channel's state topic.
func (o Options) stageConfig(rt *runtime) stage.Config {
	cfg := o.Config("sink-" + o.Channel)
	cfg.Input, cfg.Changelogs = rt.topics.Deliveries, []string{rt.topics.State}
	cfg.Outputs = []string{rt.topics.Decisions, rt.topics.Outcomes, rt.topics.Attempts, rt.topics.Devices}
	cfg.DeadLetterTopic = rt.topics.DeadLetters
	cfg.NewTask = func(p int32) stage.Task { return rt.newTask(p) }
	cfg.AfterCommit = rt.afterCommit
	cfg.Partitioner = o.Catalog.Partitioner()
	return cfg
}

// Run runs one sink instance until ctx is done.
func Run(ctx context.Context, o Options) error {
	r, err := New(o)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

func newRuntime(o Options) *runtime {
	m := o.Metrics
	rt := &runtime{
		channel: o.Channel, provider: o.Provider, topics: TopicsOf(o.Catalog, o.Channel), policy: o.Policy,
		maxInFlight: o.MaxInFlight, callTimeout: o.CallTimeout, now: o.Now, format: o.RecordFormat,
		log:        o.Logger.With("sink", o.Channel),
		tasks:      map[int32]*task{},
		calls:      m.Counter("herald_sink_calls_total", "provider calls made", "channel", o.Channel),
		duplicates: m.Counter("herald_sink_duplicates_total", "delivery commands not sent because the delivery is final or in progress", "channel", o.Channel),
		outcomes:   m.Counter("herald_sink_outcomes_total", "deliveries that reached a final outcome", "channel", o.Channel),
		inFlight:   m.Gauge("herald_sink_in_flight", "provider calls in flight", "channel", o.Channel),
		byClass:    map[Class]*metrics.Counter{},
		metrics:    m,
		rules:      metrics.NewLimit(100),
	}
	for _, c := range []Class{Success, Retryable, Permanent, Ambiguous} {
		rt.byClass[c] = m.Counter("herald_sink_results_total", "provider call results by class", "channel", o.Channel, "class", c.String())
	}
	return rt
}

func (rt *runtime) newTask(p int32) *task {
	t := newTask(rt, p)
	rt.mu.Lock()
	rt.tasks[p] = t
	rt.mu.Unlock()
	return t
}

// call is one provider call to make: the intent is committed.
type call struct {
	cmd     *schemas.DeliveryCommand
	attempt int
	// base is the delivery's SinkEntry.AttemptBase: the retry budget
	// counts the attempts after it.
	base int
}

// done is a call with its result.
type done struct {
	call
	res     Result
	latency time.Duration
	at      time.Time
}

// afterCommit makes every call whose intent the last transaction
// committed, and hands the results to their tasks; it asks for a follow-up
// transaction when there are results to commit.
func (rt *runtime) afterCommit(ctx context.Context) bool {
	rt.mu.Lock()
	type job struct {
		t *task
		c call
	}
	var jobs []job
	for _, t := range rt.tasks {
		for _, c := range t.toCall {
			jobs = append(jobs, job{t, c})
		}
		t.toCall = nil
	}
	rt.resultsRound = len(jobs) > 0
	rt.mu.Unlock()
	if len(jobs) == 0 {
		return false
	}

	// At most maxInFlight workers, each taking the next call until none
	// is left: a goroutine (and its stack, grown by the HTTP/2 client) per
	// worker, not per call.
	results := make([]done, len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(rt.maxInFlight, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(jobs); i = int(next.Add(1) - 1) {
				j := jobs[i]
				rt.inFlight.Add(1)
				cctx, cancel := context.WithTimeout(ctx, rt.callTimeout)
				start := time.Now()
				res := rt.provider.Send(cctx, j.c.cmd)
				cancel()
				rt.inFlight.Add(-1)
				results[i] = done{call: j.c, res: res, latency: time.Since(start), at: rt.now()}
			}
		}()
	}
	wg.Wait()
	rt.calls.Add(int64(len(jobs)))

	rt.mu.Lock()
	defer rt.mu.Unlock()
	for i, j := range jobs {
		r := results[i]
		if r.res.Class < Success || r.res.Class > Ambiguous {
			r.res = Result{Class: Ambiguous, Rule: "unclassified", Err: fmt.Errorf("sinks: provider returned class %d", r.res.Class)}
		}
		rt.byClass[r.res.Class].Inc()
		rt.metrics.Counter("herald_sink_attempts_total", "provider call results by class and classification rule (rules beyond the first 100 are \"other\")",
			"channel", rt.channel, "class", r.res.Class.String(), "rule", rt.rules.Value(r.res.Rule)).Inc()
		if r.res.Err != nil {
			rt.log.Debug("provider call failed", "delivery", r.cmd.DeliveryID, "attempt", r.attempt, "class", r.res.Class.String(), "rule", r.res.Rule, "err", r.res.Err)
		}
		j.t.results = append(j.t.results, r)
	}
	return true
}

func (rt *runtime) inResultsRound() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.resultsRound
}
