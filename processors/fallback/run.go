package fallback

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
	// TimerGrace: steps also fire when the wall clock minus TimerGrace
	// reaches them (1 s by default); see the package doc's hazards.
	TimerGrace time.Duration
	// MaxOpen bounds an entry's life (7 days by default).
	MaxOpen time.Duration
	// RecordFormat is how the stage writes its decisions.
	RecordFormat schemas.Format
}

// Stage is one instance of the fallback stage and its forwarders.
type Stage struct {
	Runner, Outcomes, Receipts *stage.Runner
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
	if o.TimerGrace <= 0 {
		o.TimerGrace = time.Second
	}
	t := TopicsOf(o.Catalog)
	grace := o.TimerGrace.Milliseconds()
	now := func() int64 { return time.Now().UnixMilli() - grace }
	if o.Metrics == nil {
		o.Metrics = metrics.Default
	}
	decisions := metrics.NewDecisions(o.Metrics, "fallback")
	cfg := o.Config("fallback")
	cfg.Input, cfg.Changelogs, cfg.Outputs = t.Fallback, []string{t.State}, t.outputs()
	cfg.NewTask = func(p int32) stage.Task {
		task := NewTask(t, p, now, o.MaxOpen.Milliseconds(), o.Logger)
		task.RecordFormat = o.RecordFormat
		task.decisions = decisions.Tally()
		return task
	}
	cfg.Partitioner = o.Catalog.Partitioner()
	cfg.DeadLetterTopic = o.Catalog.Name(topics.DeadLetters)
	var s Stage
	var err error
	if s.Runner, err = stage.New(cfg); err != nil {
		return nil, err
	}
	if s.Outcomes, err = newForwarder(o, "outcomes", topics.Outcomes); err != nil {
		return nil, err
	}
	if s.Receipts, err = newForwarder(o, "receipts", topics.Receipts); err != nil {
		return nil, err
	}
	return &s, nil
}

// Ready reports whether the stage and both forwarders are ready.
func (s *Stage) Ready() bool { return s.Runner.Ready() && s.Outcomes.Ready() && s.Receipts.Ready() }

// Warnings are the runners' readiness warnings.
func (s *Stage) Warnings() []string {
	return append(append(s.Runner.Warnings(), s.Outcomes.Warnings()...), s.Receipts.Warnings()...)
}

// Run runs the stage and both forwarders until ctx is done or one fails,
// which stops the others.
func (s *Stage) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, r := range []*stage.Runner{s.Runner, s.Outcomes, s.Receipts} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = r.Run(ctx); errs[i] != nil {
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

// newForwarder is the stateless stage that re-keys the outcomes or the
// receipts of the chained types onto herald.fallback by notification id.
func newForwarder(o Options, name, input string) (*stage.Runner, error) {
	inst := o.Instance
	inst.Group = o.Group + "-" + name
	cfg := inst.Config("fallback-" + name)
	cfg.Input = o.Catalog.Name(input)
	topic := o.Catalog.Name(topics.Fallback)
	cfg.Outputs = []string{topic}
	cfg.Partitioner = o.Catalog.Partitioner()
	cfg.DeadLetterTopic = o.Catalog.Name(topics.DeadLetters)
	log := o.Logger.With("stage", "fallback-"+name)
	cfg.NewTask = func(int32) stage.Task { return &forwardTask{types: o.Types, topic: topic, log: log} }
	return stage.New(cfg)
}

// forwardTask forwards one partition of herald.outcomes or
// herald.receipts: stateless.
type forwardTask struct {
	stage.Stateless
	types map[string]bool
	topic string
	log   *slog.Logger
}

// Process forwards an outcome or a receipt of a chained type, with its
// record time; anything else, or an undecodable record, is skipped.
func (f *forwardTask) Process(r *kgo.Record, out *stage.Out) error {
	var nid, typ string
	switch header(r) {
	case schemas.OutcomeV1:
		var o schemas.Outcome
		if err := schemas.Decode(r.Value, &o); err != nil {
			f.log.Warn("skip an undecodable outcome", "partition", r.Partition, "offset", r.Offset, "err", err)
			return nil
		}
		nid, typ = o.NotificationID, o.Type
		if typ == "" {
			return nil
		}
	case schemas.ReceiptV1:
		var rc schemas.Receipt
		if err := schemas.Decode(r.Value, &rc); err != nil {
			f.log.Warn("skip an undecodable receipt", "partition", r.Partition, "offset", r.Offset, "err", err)
			return nil
		}
		if rc.Kind != schemas.ReceiptDisplayed && rc.Kind != schemas.ReceiptOpened {
			return nil
		}
		nid, typ = rc.NotificationID, rc.Type
	default:
		return nil
	}
	if nid == "" || (typ != "" && !f.types[typ]) {
		return nil
	}
	value := make([]byte, len(r.Value))
	copy(value, r.Value)
	out.Emit(&kgo.Record{Topic: f.topic, Key: []byte(nid), Value: value, Timestamp: r.Timestamp,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(header(r))}}})
	return nil
}
