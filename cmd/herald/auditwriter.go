package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/heraldhq/herald/analytics/auditwriter"
	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/ops"
)

// runAuditWriter implements `herald audit-writer`: it copies the requests,
// decisions, attempts and outcomes topics into ClickHouse, exactly once,
// until SIGINT or SIGTERM. Run one per database; it resumes from what
// ClickHouse holds, so it may be killed at any moment.
func runAuditWriter(ctx context.Context, args []string, _ io.Writer) error {
	fs := newFlagSet("audit-writer")
	var kf kafkaFlags
	kf.register(fs)
	var ch clickhouseFlags
	ch.register(fs)
	var of opsFlags
	of.register(fs)
	batchRows := fs.Int("batch-rows", 50_000, "most rows of one insert")
	flush := fs.Duration("flush-interval", time.Second, "longest a record waits for its insert (about one insert per table per interval under load)")
	migrate := fs.Bool("migrate", false, "apply pending migrations first (as herald migrate)")
	ttl := fs.Int("ttl-days", migrations.DefaultTTLDays, "with --migrate: days the audit record is kept")
	atLeast(fs, "batch-rows", batchRows, 1)
	positive(fs, "flush-interval", flush)
	atLeast(fs, "ttl-days", ttl, 1)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	seeds, kopts, err := kf.connect()
	if err != nil {
		return err
	}
	conn, err := ch.open(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if *migrate {
		if _, err := migrations.Apply(ctx, conn, migrations.Options{Database: ch.database, TTLDays: *ttl, AppliedBy: "herald audit-writer"}); err != nil {
			return err
		}
	}
	w, err := auditwriter.New(auditwriter.Options{
		Brokers:       seeds,
		ClientOpts:    kopts,
		Catalog:       kf.catalog(),
		ClickHouse:    conn,
		Database:      ch.database,
		BatchRows:     *batchRows,
		FlushInterval: *flush,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	stop, err := of.serve(ops.Check{Name: "audit writer (connected to Kafka and ClickHouse)", Ready: w.Ready})
	if err != nil {
		return err
	}
	defer stop()
	return w.Run(ctx)
}
