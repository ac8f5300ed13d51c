package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/heraldhq/herald/analytics/migrations"
)

// runMigrate implements `herald migrate`: it creates herald's ClickHouse
// database and applies every migration not yet recorded, then sets the
// audit TTL on every table. Safe to run any number of times, also
// concurrently.
func runMigrate(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("migrate")
	var ch clickhouseFlags
	ch.register(fs)
	ttl := fs.Int("ttl-days", migrations.DefaultTTLDays, "days the audit record is kept, on every table")
	progress := fs.Bool("progress", false, "draw a progress bar on stderr even when it is not a terminal")
	atLeast(fs, "ttl-days", ttl, 1)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	conn, err := ch.open(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	host, _ := os.Hostname()
	bar := newProgress("migrate", "steps", *progress)
	res, err := migrations.Apply(ctx, conn, migrations.Options{Database: ch.database, TTLDays: *ttl, AppliedBy: "herald migrate@" + host, Progress: bar.Update})
	bar.Finish()
	for _, m := range res.Applied {
		fmt.Fprintf(stdout, "applied %s\n", m)
	}
	for _, t := range res.TTLChanged {
		fmt.Fprintf(stdout, "ttl of %s set to %d days\n", t, *ttl)
	}
	if err != nil {
		return err
	}
	done, err := migrations.List(ctx, conn, ch.database)
	if err != nil {
		return err
	}
	last := ""
	if len(done) > 0 {
		last = fmt.Sprintf("%04d_%s", done[len(done)-1].Version, done[len(done)-1].Name)
	}
	if len(res.Applied) == 0 && len(res.TTLChanged) == 0 {
		fmt.Fprintf(stdout, "ok: database %s is up to date at %s (TTL %d days); nothing to do\n", ch.database, last, *ttl)
	} else {
		fmt.Fprintf(stdout, "ok: database %s is at %s (TTL %d days)\n", ch.database, last, *ttl)
	}
	return nil
}
