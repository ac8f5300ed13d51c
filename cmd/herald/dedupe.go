package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/processors/dedupe"
)

// runDedupe implements `herald dedupe`: one instance of the dedupe stage.
func runDedupe(ctx context.Context, args []string, _ io.Writer) error {
	fs := newFlagSet("dedupe")
	var kf kafkaFlags
	kf.register(fs)
	host, _ := os.Hostname()
	d := dedupe.DefaultPolicy()
	instance := fs.String("instance-id", host, "this instance's name, stable across restarts (its transactional id)")
	group := fs.String("group", "herald-dedupe", "consumer group of the dedupe stage")
	window := fs.Duration("dedupe-window", time.Duration(d.DefaultWindowMs)*time.Millisecond, "default dedupe window")
	typeWindows := fs.String("type-windows", "", "per-type dedupe windows, e.g. 'invoice.paid=24h,chat.message=30s'")
	ttl := fs.Duration("idempotency-ttl", time.Duration(d.IdempotencyTTLMs)*time.Millisecond, "idempotency key TTL")
	batch := fs.Int("batch-records", 2000, "most records in one transaction")
	interval := fs.Duration("batch-interval", 100*time.Millisecond, "longest a transaction collects records")
	txnTimeout := fs.Duration("transaction-timeout", 10*time.Second, "transaction timeout (bounds a crashed instance's hold on readers)")
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
	tw, err := parseTypeWindows(*typeWindows)
	if err != nil {
		return err
	}
	return dedupe.Run(ctx, dedupe.Options{
		Brokers:            seeds,
		Catalog:            kf.catalog(),
		Group:              *group,
		InstanceID:         *instance,
		Policy:             dedupe.Policy{DefaultWindowMs: window.Milliseconds(), TypeWindowMs: tw, IdempotencyTTLMs: ttl.Milliseconds()},
		MaxBatchRecords:    *batch,
		BatchInterval:      *interval,
		TransactionTimeout: *txnTimeout,
	})
}

func parseTypeWindows(s string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		typ, dur, ok := strings.Cut(kv, "=")
		if !ok || typ == "" {
			return nil, fmt.Errorf("%w: --type-windows: %q is not type=duration", errUsage, kv)
		}
		d, err := time.ParseDuration(dur)
		if err != nil {
			ms, err2 := strconv.ParseInt(dur, 10, 64)
			if err2 != nil || ms <= 0 {
				return nil, fmt.Errorf("%w: --type-windows: %s: %v", errUsage, typ, err)
			}
			d = time.Duration(ms) * time.Millisecond
		}
		if d <= 0 {
			return nil, fmt.Errorf("%w: --type-windows: %s: window must be positive", errUsage, typ)
		}
		out[typ] = d.Milliseconds()
	}
	return out, nil
}
