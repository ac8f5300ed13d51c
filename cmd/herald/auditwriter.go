package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

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
	conn, err := openClickHouseRetrying(ctx, &ch, clickHouseStartPatience, func(conn driver.Conn) error {
		if !*migrate {
			return nil
		}
		_, err := migrations.Apply(ctx, conn, migrations.Options{Database: ch.database, TTLDays: *ttl, AppliedBy: "herald audit-writer"})
		return err
	})
	if err != nil {
		return err
	}
	defer conn.Close()
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

// clickHouseStartPatience bounds how long the audit writer waits at start
// for a ClickHouse server that does not answer.
const clickHouseStartPatience = 2 * time.Minute

// openClickHouseRetrying opens ClickHouse and runs then (the migrations)
// on the connection, again with a backoff (0.5 s doubling to 5 s) while
// either fails for want of the server — a server restarting while the
// audit writer starts (found by scripts/chaos: the audit writer, SIGKILLed
// and restarted while ClickHouse was down, exited 26 times in a row) —
// for up to patience. A usage error, or an error the server answered
// (a ClickHouse exception), is returned at once.
func openClickHouseRetrying(ctx context.Context, ch *clickhouseFlags, patience time.Duration, then func(driver.Conn) error) (driver.Conn, error) {
	deadline := time.Now().Add(patience)
	backoff := 500 * time.Millisecond
	for {
		conn, err := ch.open(ctx)
		if err == nil {
			if err = then(conn); err != nil {
				conn.Close()
			} else {
				return conn, nil
			}
		}
		var exc *clickhouse.Exception
		if errors.Is(err, errUsage) || errors.As(err, &exc) || ctx.Err() != nil || time.Now().After(deadline) {
			return nil, err
		}
		slog.Warn("clickhouse not reachable; trying again", "addr", ch.addr, "in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
