package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/dedupe"
)

// runDedupe implements `herald dedupe`: one instance of the dedupe stage.
func runDedupe(ctx context.Context, args []string, _ io.Writer) error {
	fs := newFlagSet("dedupe")
	var kf kafkaFlags
	kf.register(fs)
	var pf policyFlags
	pf.register(fs)
	host, _ := os.Hostname()
	instance := fs.String("instance-id", host, "this instance's name, stable across restarts (its transactional id)")
	group := fs.String("group", "herald-dedupe", "consumer group of the dedupe stage")
	batch := fs.Int("batch-records", 2000, "most records in one transaction")
	interval := fs.Duration("batch-interval", 100*time.Millisecond, "longest a transaction collects records")
	txnTimeout := fs.Duration("transaction-timeout", 10*time.Second, "transaction timeout (bounds a crashed instance's hold on readers)")
	rebalanceTimeout := fs.Duration("rebalance-timeout", time.Minute,
		"how long the group waits for members to rejoin a rebalance; partitions restore inside it, so set it above the longest restore: "+
			"records in the largest seen partition ÷ the records_per_s logged by \"partition restored\" × ⌈partitions per instance ÷ 4⌉ (4 restore at once)")
	reset := fs.String("reset-offsets", "",
		"where a partition with no committed group offset starts: empty refuses to start when the seen-set already holds state "+
			"(the group's offsets were lost, e.g. expired after offsets.retention.minutes with no member, and a replay would accept "+
			"expired requests again); earliest re-decides the whole retained input against the restored seen-set, latest skips to the end. "+
			"Pass it for one restart, then remove it")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	seeds, err := kf.seeds()
	if err != nil {
		return err
	}
	if *instance == "" {
		return fmt.Errorf("%w: --instance-id is empty", errUsage)
	}
	if err := stage.CheckResetOffsets(*reset); err != nil {
		return fmt.Errorf("%w: --reset-offsets %v", errUsage, err)
	}
	policy, err := pf.policy()
	if err != nil {
		return err
	}
	return dedupe.Run(ctx, dedupe.Options{
		Brokers:            seeds,
		Catalog:            kf.catalog(),
		Group:              *group,
		InstanceID:         *instance,
		Policy:             policy,
		MaxBatchRecords:    *batch,
		BatchInterval:      *interval,
		TransactionTimeout: *txnTimeout,
		RebalanceTimeout:   *rebalanceTimeout,
		ResetOffsets:       *reset,
	})
}
