package dedupe

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/topics"
)

// Options configure one instance of the dedupe stage.
type Options struct {
	Brokers []string
	Catalog *topics.Catalog
	// Group is the consumer group; "herald-dedupe" by default.
	Group string
	// InstanceID names this instance, stable across its restarts: its
	// transactional id is Group + "-" + InstanceID, so a restart fences
	// the crashed predecessor's open transaction at once.
	InstanceID      string
	Policy          Policy
	MaxBatchRecords int
	BatchInterval   time.Duration
	// TransactionTimeout: 10 s by default.
	TransactionTimeout time.Duration
	// RebalanceTimeout: 60 s by default; see stage.Config.RebalanceTimeout
	// for sizing it from the restore speed.
	RebalanceTimeout time.Duration
	// ResetOffsets is stage.Config.ResetOffsets: "" refuses to start a
	// partition whose group offset was lost while its seen-set holds
	// state; "earliest" or "latest" is the operator's explicit choice.
	ResetOffsets string
	ClientOpts   []kgo.Opt
	Logger       *slog.Logger
	// Metrics receives the stage's metrics (metrics.Default when nil).
	Metrics *metrics.Registry
}

// TopicsOf returns the dedupe stage's topics in a catalog.
func TopicsOf(c *topics.Catalog) Topics {
	return Topics{
		Requests:  c.Name(topics.Requests),
		Decisions: c.Name(topics.Decisions),
		Seen:      c.Name(topics.Seen),
		Accepted:  c.Name(topics.Accepted),
	}
}

// New builds the stage runner.
func New(o Options) (*stage.Runner, error) {
	if o.Catalog == nil || o.InstanceID == "" {
		return nil, errors.New("dedupe: Catalog and InstanceID are required")
	}
	if o.Group == "" {
		o.Group = "herald-dedupe"
	}
	if o.Policy.DefaultWindowMs == 0 && o.Policy.IdempotencyTTLMs == 0 {
		o.Policy = DefaultPolicy()
	}
	t := TopicsOf(o.Catalog)
	if o.Metrics == nil {
		o.Metrics = metrics.Default
	}
	decisions := metrics.NewDecisions(o.Metrics, "dedupe")
	return stage.New(stage.Config{
		Name:            "dedupe",
		Brokers:         o.Brokers,
		Group:           o.Group,
		TransactionalID: o.Group + "-" + o.InstanceID,
		GroupInstanceID: o.InstanceID,
		Input:           t.Requests,
		Changelogs:      []string{t.Seen},
		NewTask: func(p int32) stage.Task {
			task := NewTask(o.Policy, t, p)
			task.decisions = decisions.Tally()
			return task
		},
		Partitioner:        o.Catalog.Partitioner(),
		MaxBatchRecords:    o.MaxBatchRecords,
		BatchInterval:      o.BatchInterval,
		TransactionTimeout: o.TransactionTimeout,
		RebalanceTimeout:   o.RebalanceTimeout,
		ResetOffsets:       o.ResetOffsets,
		DeadLetterTopic:    o.Catalog.Name(topics.DeadLetters),
		ClientOpts:         o.ClientOpts,
		Logger:             o.Logger,
		Metrics:            o.Metrics,
	})
}

// Run runs one instance until ctx is done.
func Run(ctx context.Context, o Options) error {
	r, err := New(o)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}
