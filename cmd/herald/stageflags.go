package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
)

// stageFlags are the flags of a stage command (dedupe, route): the
// instance, its group, and the stage runtime's batch, transaction,
// rebalance and offset-reset settings.
type stageFlags struct {
	instance, group, reset                 string
	batch, restoreParallelism              int
	interval, txnTimeout, rebalanceTimeout time.Duration
	linger, minTxnInterval                 time.Duration
}

// register adds the flags; stateName names the stage's changelog state in
// the help ("the seen-set"), replay what --reset-offsets=earliest does.
func (s *stageFlags) register(fs *flag.FlagSet, stageName, group, stateName, replay string) {
	host, _ := os.Hostname()
	fs.StringVar(&s.instance, "instance-id", host, "this instance's name, stable across restarts (its transactional id)")
	fs.StringVar(&s.group, "group", group, "consumer group of the "+stageName+" stage")
	fs.IntVar(&s.batch, "batch-records", 2000, "most records in one transaction")
	fs.DurationVar(&s.interval, "batch-interval", 100*time.Millisecond,
		"longest an idle poll waits (timers fire at least this often); a transaction closes as soon as the fetch is drained")
	fs.DurationVar(&s.minTxnInterval, "min-transaction-interval", DefaultMinTransactionInterval,
		"shortest time from one transaction with input to the next: the input arriving meanwhile shares one transaction, "+
			"whose fixed cost to the broker (commit, offsets, markers on every partition it touched) is then paid at most this often, "+
			"for at most this much latency; an idle stage's record is committed at once; 0: none, a transaction per drained fetch")
	fs.DurationVar(&s.txnTimeout, "transaction-timeout", 10*time.Second, "transaction timeout (bounds a crashed instance's hold on readers)")
	fs.DurationVar(&s.linger, "producer-linger", stage.DefaultProducerLinger, "how long the producer lets a batch of outputs fill while a transaction's inputs are processed (the end of every transaction sends at once); 0: none")
	fs.DurationVar(&s.rebalanceTimeout, "rebalance-timeout", time.Minute,
		"how long the group waits for members to rejoin a rebalance; partitions restore inside it, so set it above the longest restore: "+
			"records in the largest partition of "+stateName+" ÷ the records_per_s logged by \"partition restored\" × ⌈partitions per instance ÷ --restore-parallelism⌉")
	fs.IntVar(&s.restoreParallelism, "restore-parallelism", 4,
		"how many assigned partitions restore "+stateName+" at once; as many as an instance is assigned restores fastest when its memory allows (BENCHMARKS.md)")
	fs.StringVar(&s.reset, "reset-offsets", "",
		"where a partition with no committed group offset starts: empty refuses to start when "+stateName+" already holds state "+
			"(the group's offsets were lost, e.g. expired after offsets.retention.minutes with no member, and a replay would decide "+
			"history again); earliest "+replay+", latest skips to the end. Pass it for one restart, then remove it")
	notEmpty(fs, "group", &s.group)
	atLeast(fs, "batch-records", &s.batch, 1)
	positive(fs, "batch-interval", &s.interval)
	positive(fs, "transaction-timeout", &s.txnTimeout)
	positive(fs, "rebalance-timeout", &s.rebalanceTimeout)
	atLeast(fs, "restore-parallelism", &s.restoreParallelism, 1)
	addCheck(fs, s.check)
}

// check reports a usage error in the parsed flags.
func (s *stageFlags) check() error {
	var errs []error
	if s.instance == "" {
		errs = append(errs, badField("instance-id", "is empty"))
	}
	if err := stage.CheckResetOffsets(s.reset); err != nil {
		errs = append(errs, badField("reset-offsets", "%v", err))
	}
	if err := checkProducerLinger(s.linger); err != nil {
		errs = append(errs, err)
	}
	if s.minTxnInterval < 0 || s.minTxnInterval > 10*time.Second {
		errs = append(errs, badField("min-transaction-interval", "must be between 0 and 10s, got %v", s.minTxnInterval))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", errUsage, errors.Join(errs...))
	}
	return nil
}

// runtime is the stage runtime's settings from the flags, with the
// brokers and client options of the Kafka flags.
func (s *stageFlags) runtime(brokers []string, opts []kgo.Opt) stage.Instance {
	return stage.Instance{Brokers: brokers, ClientOpts: opts, Group: s.group, InstanceID: s.instance,
		MaxBatchRecords: s.batch, BatchInterval: s.interval, MinTransactionInterval: s.minTxnInterval, TransactionTimeout: s.txnTimeout,
		RebalanceTimeout: s.rebalanceTimeout, ResetOffsets: s.reset, RestoreParallelism: s.restoreParallelism,
		ProducerLinger: producerLinger(s.linger)}
}

// DefaultMinTransactionInterval is --min-transaction-interval's default
// for the stage roles: at 2,000 sends/s about 20 sends share a transaction
// of the dedupe stage instead of a handful (docs/benchmarks-history.md,
// "Requests per send").
const DefaultMinTransactionInterval = 10 * time.Millisecond

// checkProducerLinger refuses a --producer-linger the producer cannot
// take: negative, or longer than a minute.
func checkProducerLinger(d time.Duration) error {
	if d < 0 || d > time.Minute {
		return badField("producer-linger", "must be between 0 and 1m, got %v", d)
	}
	return nil
}

// producerLinger is the runtime's ProducerLinger for the
// --producer-linger flag, whose 0 means none (the runtime's 0 is its
// default).
func producerLinger(flag time.Duration) time.Duration {
	if flag == 0 {
		return -1
	}
	return flag
}
