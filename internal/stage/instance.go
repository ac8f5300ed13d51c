package stage

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
)

// Instance is what the options of every herald stage share: the brokers,
// the group, this instance's identity and the runtime's batch, timeout and
// reset settings. Each stage's Options embed it and build their Config
// from it (Config), so the mapping onto the runtime is written once.
type Instance struct {
	Brokers []string
	// Group is the consumer group of all instances of the stage; each
	// stage has its own default ("herald-dedupe", "herald-route", ...).
	Group string
	// InstanceID names this instance, stable across its restarts: its
	// transactional id is Group + "-" + InstanceID and it is the group's
	// static member id, so a restart fences the crashed predecessor's
	// open transaction and takes its partitions back without a rebalance.
	InstanceID string
	// MaxBatchRecords, BatchInterval, TransactionTimeout, SessionTimeout,
	// RebalanceTimeout and ResetOffsets are Config's, with its defaults:
	// size RebalanceTimeout above the longest restore of the stage's
	// changelog partitions; ResetOffsets is the operator's choice when the
	// group's offsets were lost.
	MaxBatchRecords int
	BatchInterval   time.Duration
	// MinTransactionInterval is Config's: the shortest time from one
	// transaction with input to the next (0: none).
	MinTransactionInterval time.Duration
	TransactionTimeout     time.Duration
	SessionTimeout         time.Duration
	RebalanceTimeout       time.Duration
	ResetOffsets           string
	// RestoreParallelism is Config's: how many partitions restore at once.
	RestoreParallelism int
	// ProducerLinger is Config's: how long outputs wait to fill a batch
	// while a transaction's inputs are processed.
	ProducerLinger time.Duration
	ClientOpts     []kgo.Opt
	Logger         *slog.Logger
	// Metrics receives the stage's metrics (metrics.Default when nil).
	Metrics *metrics.Registry
}

// Config is the runtime configuration of this instance of the stage named
// name. The caller adds what is the stage's own: its input, changelogs,
// tasks, partitioner, dead-letter topic and hooks.
func (i Instance) Config(name string) Config {
	return Config{
		Name:                   name,
		Brokers:                i.Brokers,
		Group:                  i.Group,
		TransactionalID:        i.Group + "-" + i.InstanceID,
		GroupInstanceID:        i.InstanceID,
		MaxBatchRecords:        i.MaxBatchRecords,
		BatchInterval:          i.BatchInterval,
		MinTransactionInterval: i.MinTransactionInterval,
		TransactionTimeout:     i.TransactionTimeout,
		SessionTimeout:         i.SessionTimeout,
		RebalanceTimeout:       i.RebalanceTimeout,
		ResetOffsets:           i.ResetOffsets,
		RestoreParallelism:     i.RestoreParallelism,
		ProducerLinger:         i.ProducerLinger,
		ClientOpts:             i.ClientOpts,
		Logger:                 i.Logger,
		Metrics:                i.Metrics,
	}
}
