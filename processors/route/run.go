package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/topics"
)

// Options configure one instance of the route stage.
type Options struct {
	Brokers []string
	Catalog *topics.Catalog
	// Group is the consumer group; "herald-route" by default.
	Group string
	// InstanceID names this instance, stable across its restarts: its
	// transactional id is Group + "-" + InstanceID.
	InstanceID string
	Policy     Policy
	// TimerGrace: timers fire when stream time reaches them, or the wall
	// clock minus TimerGrace does (1 s by default; negative: stream time
	// only, as replay does).
	TimerGrace      time.Duration
	MaxBatchRecords int
	BatchInterval   time.Duration
	// TransactionTimeout: 10 s by default.
	TransactionTimeout time.Duration
	ClientOpts         []kgo.Opt
	Logger             *slog.Logger
}

// Run runs one instance until ctx is done: it reads devices and
// preferences to their ends, then runs the stage over herald.accepted,
// restoring herald.route per assigned partition.
func Run(ctx context.Context, o Options) error {
	if o.Catalog == nil || o.InstanceID == "" {
		return errors.New("route: Catalog and InstanceID are required")
	}
	if o.Group == "" {
		o.Group = "herald-route"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.TimerGrace == 0 {
		o.TimerGrace = time.Second
	}
	t := TopicsOf(o.Catalog)
	tableOpts := append([]kgo.Opt{kgo.SeedBrokers(o.Brokers...)}, o.ClientOpts...)
	table, err := NewTable(t.Devices, t.Preferences, o.Logger, tableOpts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tableDone := make(chan error, 1)
	go func() { tableDone <- table.Run(ctx) }()
	defer func() { cancel(); <-tableDone }()
	if err := table.SyncAll(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("route: read devices and preferences: %w", err)
	}
	var now func() int64
	if o.TimerGrace > 0 {
		grace := o.TimerGrace.Milliseconds()
		now = func() int64 { return time.Now().UnixMilli() - grace }
	}
	r, err := stage.New(stage.Config{
		Name:               "route",
		Brokers:            o.Brokers,
		Group:              o.Group,
		TransactionalID:    o.Group + "-" + o.InstanceID,
		GroupInstanceID:    o.InstanceID,
		Input:              t.Accepted,
		Changelogs:         []string{t.Route},
		NewTask:            func(p int32) stage.Task { return NewTask(o.Policy, t, p, table, now) },
		Partitioner:        o.Catalog.Partitioner(),
		MaxBatchRecords:    o.MaxBatchRecords,
		BatchInterval:      o.BatchInterval,
		TransactionTimeout: o.TransactionTimeout,
		ClientOpts:         o.ClientOpts,
		Logger:             o.Logger,
	})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}
