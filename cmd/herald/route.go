package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/heraldhq/herald/processors/route"
)

// runRoute implements `herald route`: one instance of the route stage.
func runRoute(ctx context.Context, args []string, _ io.Writer) error {
	fs := newFlagSet("route")
	var kf kafkaFlags
	kf.register(fs)
	var rf routeFlags
	rf.register(fs)
	host, _ := os.Hostname()
	instance := fs.String("instance-id", host, "this instance's name, stable across restarts (its transactional id)")
	group := fs.String("group", "herald-route", "consumer group of the route stage")
	batch := fs.Int("batch-records", 2000, "most records in one transaction")
	interval := fs.Duration("batch-interval", 100*time.Millisecond, "longest a transaction collects records")
	txnTimeout := fs.Duration("transaction-timeout", 10*time.Second, "transaction timeout (bounds a crashed instance's hold on readers)")
	rebalanceTimeout := fs.Duration("rebalance-timeout", time.Minute,
		"how long the group waits for members to rejoin a rebalance; partitions restore inside it: set it above the longest restore of herald.route")
	reset := fs.String("reset-offsets", "",
		"where a partition with no committed group offset starts: empty refuses to start when herald.route already holds state "+
			"(the group's offsets were lost); earliest re-decides the retained input, latest skips to the end. Pass it for one restart, then remove it")
	grace := fs.Duration("timer-grace", time.Second, "timers also fire when the wall clock minus this reaches them (digest ends, quiet-hours ends)")
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
	if *grace <= 0 {
		return fmt.Errorf("%w: --timer-grace must be positive, got %v", errUsage, *grace)
	}
	if *reset != "" && *reset != "earliest" && *reset != "latest" {
		return fmt.Errorf("%w: --reset-offsets must be earliest, latest or empty, got %q", errUsage, *reset)
	}
	policy, err := rf.policy()
	if err != nil {
		return err
	}
	return route.Run(ctx, route.Options{
		Brokers:            seeds,
		Catalog:            kf.catalog(),
		Group:              *group,
		InstanceID:         *instance,
		Policy:             policy,
		TimerGrace:         *grace,
		MaxBatchRecords:    *batch,
		BatchInterval:      *interval,
		TransactionTimeout: *txnTimeout,
		RebalanceTimeout:   *rebalanceTimeout,
		ResetOffsets:       *reset,
	})
}
