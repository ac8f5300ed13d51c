package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// Options configure one instance of the route stage.
type Options struct {
	// The runtime's settings; Group is "herald-route" by default.
	stage.Instance
	Catalog *topics.Catalog
	Policy  Policy
	// TimerGrace: timers fire when stream time reaches them, or the wall
	// clock minus TimerGrace does (1 s by default).
	TimerGrace time.Duration
	// RecordFormat is how the stage writes its decisions:
	// schemas.FormatBinary (the zero value, herald.decision/v2) or
	// schemas.FormatJSON (v1, while a reader of an earlier herald that
	// reads only JSON still runs).
	RecordFormat schemas.Format
}

// Stage is one instance of the route stage: the devices and preferences
// table and the stage runner over herald.accepted.
type Stage struct {
	runner *stage.Runner
	table  *Table
	synced atomic.Bool
	log    *slog.Logger
}

// New builds an instance; Run starts it.
func New(o Options) (*Stage, error) {
	if o.Catalog == nil || o.InstanceID == "" {
		return nil, errors.New("route: Catalog and InstanceID are required")
	}
	o = o.withDefaults()
	t := TopicsOf(o.Catalog)
	if len(o.Policy.Chains) == 0 {
		t.Fallback = "" // not an output: a deployment without chains needs no fallback topic
	}
	table, err := NewGroupTable(t.Devices, t.Preferences, t.Segments, o.Logger, append([]kgo.Opt{kgo.SeedBrokers(o.Brokers...)}, o.ClientOpts...)...)
	if err != nil {
		return nil, err
	}
	decisions := metrics.NewDecisions(o.Metrics, "route")
	now := timerClock(o.TimerGrace, time.Now)
	cfg := o.Config("route")
	cfg.Input, cfg.Changelogs, cfg.Outputs = t.Accepted, []string{t.Route}, t.outputs()
	cfg.NewTask = func(p int32) stage.Task {
		task := NewTask(o.Policy, t, p, table, now)
		task.decisions = decisions.Tally()
		task.RecordFormat = o.RecordFormat
		return task
	}
	cfg.Partitioner = o.Catalog.Partitioner()
	cfg.DeadLetterTopic = o.Catalog.Name(topics.DeadLetters)
	r, err := stage.New(cfg)
	if err != nil {
		table.cl.Close()
		return nil, err
	}
	return &Stage{runner: r, table: table, log: o.Logger}, nil
}

// withDefaults fills what o leaves unset: the group, the logger, the
// metrics registry and the timer grace.
func (o Options) withDefaults() Options {
	if o.Group == "" {
		o.Group = "herald-route"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = metrics.Default
	}
	if o.TimerGrace <= 0 {
		o.TimerGrace = time.Second
	}
	return o
}

// timerClock is the wall-clock side of the clock timers fire on
// (milliseconds): the wall clock less grace, so a record up to grace late
// still joins the digest window it falls in (see the package doc).
func timerClock(grace time.Duration, wall func() time.Time) func() int64 {
	ms := grace.Milliseconds()
	return func() int64 { return wall().UnixMilli() - ms }
}

// Ready reports whether the table has caught up with devices and
// preferences and the runner is ready (see stage.Runner.Ready).
func (s *Stage) Ready() bool { return s.synced.Load() && s.runner.Ready() }

// Warnings are the runner's readiness warnings (stage.Runner.Warnings).
func (s *Stage) Warnings() []string { return s.runner.Warnings() }

// Run reads devices and preferences to their ends, then runs the stage
// until ctx is done.
func (s *Stage) Run(ctx context.Context) error {
	return s.table.RunWith(ctx, func() { s.synced.Store(true) }, s.runner.Run)
}

// RunWith reads both topics (Run) while it runs run, which starts once the
// table has read them to their ends (SyncAll) and synced is called; it
// returns run's error, or nil when ctx ends first, and stops the table
// before returning.
//
// A broker out of reach, or the topics not created yet, is waited out:
// SyncAll is tried again after a backoff (logged, not ready meanwhile), as
// a stage's session is, so that a role started during an outage rides it
// out. Only the broker refusing the instance (stage.Denied) ends it.
func (t *Table) RunWith(ctx context.Context, synced func(), run func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tableDone := make(chan error, 1)
	go func() { tableDone <- t.Run(ctx) }()
	defer func() { cancel(); <-tableDone }()
	for failures := 1; ; failures++ {
		err := t.SyncAll(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if stage.Denied(err) {
			return fmt.Errorf("route: read devices and preferences: %w", err)
		}
		d := backoff.Default.Delay(failures, 0)
		t.log.Warn("route table: devices and preferences not read; trying again after a backoff", "err", err, "failures", failures, "backoff", d)
		if backoff.Sleep(ctx, d) != nil {
			return nil
		}
	}
	synced()
	return run(ctx)
}

// Run runs one instance until ctx is done.
func Run(ctx context.Context, o Options) error {
	s, err := New(o)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}
