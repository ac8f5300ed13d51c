package fallback

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// Options configure one instance of the fallback stage and its two
// forwarders.
type Options struct {
	// The runtime's settings; Group is "herald-fallback" by default, and
	// the forwarders' groups are Group + "-outcomes" and Group +
	// "-receipts".
	stage.Instance
	Catalog *topics.Catalog
	// Types are the types with a fallback chain: only their outcomes and
	// receipts are forwarded (a receipt that names no type is forwarded).
	Types map[string]bool
	// MarkInterval is how often each forwarder reads how far its topic's
	// partitions are committed and, once it has forwarded that far, writes
	// its watermarks (1 s by default): the stage's clock trails the wall
	// clock by about that much more than the forwarders' lag.
	MarkInterval time.Duration
	// MaxOpen bounds an entry's life (7 days by default).
	MaxOpen time.Duration
	// RecordFormat is how the stage writes its decisions.
	RecordFormat schemas.Format
}

// Stage is one instance of the fallback stage and its forwarders.
type Stage struct {
	Runner             *stage.Runner
	Outcomes, Receipts *Forwarder
}

// New builds an instance; Run starts it.
func New(o Options) (*Stage, error) {
	if o.Catalog == nil || o.InstanceID == "" {
		return nil, errors.New("fallback: Catalog and InstanceID are required")
	}
	if o.Group == "" {
		o.Group = "herald-fallback"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MarkInterval <= 0 {
		o.MarkInterval = time.Second
	}
	t := TopicsOf(o.Catalog)
	if o.Metrics == nil {
		o.Metrics = metrics.Default
	}
	decisions := metrics.NewDecisions(o.Metrics, "fallback")
	cfg := o.Config("fallback")
	cfg.Input, cfg.Changelogs, cfg.Outputs = t.Fallback, []string{t.State}, t.outputs()
	reg := o.Metrics
	cfg.NewTask = func(p int32) stage.Task {
		task := NewTask(t, p, o.MaxOpen.Milliseconds(), o.Logger)
		task.RecordFormat = o.RecordFormat
		task.decisions = decisions.Tally()
		labels := []string{"partition", strconv.Itoa(int(p))}
		task.lag = reg.Gauge(lagMetric, lagHelp, labels...)
		task.forget = func() { reg.Forget(lagMetric, labels...) }
		return task
	}
	cfg.Partitioner = o.Catalog.Partitioner()
	cfg.DeadLetterTopic = o.Catalog.Name(topics.DeadLetters)
	var s Stage
	var err error
	if s.Runner, err = stage.New(cfg); err != nil {
		return nil, err
	}
	if s.Outcomes, err = newForwarder(o, schemas.MarkOutcomes, topics.Outcomes); err != nil {
		return nil, err
	}
	if s.Receipts, err = newForwarder(o, schemas.MarkReceipts, topics.Receipts); err != nil {
		return nil, err
	}
	return &s, nil
}

const (
	lagMetric = "herald_fallback_watermark_lag_seconds"
	lagHelp   = "the wall clock minus the fallback stage's clock on a herald.fallback partition (the earliest of the forwarders' watermarks): how late its steps fire; a stalled forwarder makes it grow"
)

// Ready reports whether the stage and both forwarders are ready.
func (s *Stage) Ready() bool { return s.Runner.Ready() && s.Outcomes.Ready() && s.Receipts.Ready() }

// Warnings are the runners' readiness warnings.
func (s *Stage) Warnings() []string {
	return append(append(s.Runner.Warnings(), s.Outcomes.Runner.Warnings()...), s.Receipts.Runner.Warnings()...)
}

// Run runs the stage and both forwarders until ctx is done or one fails,
// which stops the others.
func (s *Stage) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	runs := []func(context.Context) error{s.Runner.Run, s.Outcomes.Run, s.Receipts.Run}
	errs := make([]error, len(runs))
	for i, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = run(ctx); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Run runs one instance until ctx is done.
func Run(ctx context.Context, o Options) error {
	s, err := New(o)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}
