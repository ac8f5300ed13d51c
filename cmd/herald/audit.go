package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/identity"
)

// runAudit implements `herald audit timeline`:
//
//	herald audit timeline --id <notification id>
//	herald audit timeline --recipient <recipient> --since <time|duration> [--until <time>]
//	herald audit timeline --dedupe-key <key> [--type <type>]
//
// each optionally narrowed with --tenant. It prints every request,
// decision, attempt and outcome in time order, with reasons, and answers
// whether anything reached a device twice.
func runAudit(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "timeline" {
		return fmt.Errorf("%w: want 'herald audit timeline --id … | --recipient … --since … | --dedupe-key …'", errUsage)
	}
	fs := newFlagSet("audit timeline")
	var ch clickhouseFlags
	ch.register(fs)
	var sel audit.Selector
	fs.StringVar(&sel.NotificationID, "id", "", "notification id")
	fs.StringVar(&sel.Recipient, "recipient", "", "recipient (with --since)")
	fs.StringVar(&sel.DedupeKey, "dedupe-key", "", "dedupe key")
	fs.StringVar(&sel.Tenant, "tenant", "", "only this tenant")
	fs.StringVar(&sel.Type, "type", "", "with --dedupe-key: only this notification type")
	since := fs.String("since", "", "with --recipient: start, as a time (RFC 3339, or 2006-01-02) or a duration ago (72h)")
	until := fs.String("until", "", "with --recipient: end (default now)")
	sameContent := fs.Duration("same-content-window", 24*time.Hour,
		"with --recipient: warn when the same content (type, title and body) reached one device under two notification ids at most this far apart (0: off)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	now := time.Now()
	var err error
	if *since != "" {
		if sel.Since, err = auditTime(*since, now); err != nil {
			return fmt.Errorf("%w: --since: %v", errUsage, err)
		}
	}
	if *until != "" {
		if sel.Until, err = auditTime(*until, now); err != nil {
			return fmt.Errorf("%w: --until: %v", errUsage, err)
		}
	}
	n := 0
	for _, v := range []string{sel.NotificationID, sel.Recipient, sel.DedupeKey} {
		if v != "" {
			n++
		}
	}
	switch {
	case n != 1:
		return fmt.Errorf("%w: give exactly one of --id, --recipient or --dedupe-key", errUsage)
	case sel.NotificationID != "" && !identity.Valid(sel.NotificationID):
		return fmt.Errorf("%w: --id %q is not a notification id: 32 lower-case hex characters, as herald id prints", errUsage, sel.NotificationID)
	case sel.Recipient != "" && sel.Since.IsZero():
		return fmt.Errorf("%w: --recipient needs --since", errUsage)
	case sel.Recipient == "" && (onCommandLine(fs, "since") || onCommandLine(fs, "until")):
		return fmt.Errorf("%w: --since and --until apply only with --recipient", errUsage)
	case !sel.Until.IsZero() && !sel.Until.After(sel.Since):
		return fmt.Errorf("%w: --until (%s) must be after --since (%s)", errUsage, sel.Until.Format(time.RFC3339), sel.Since.Format(time.RFC3339))
	case sel.DedupeKey == "" && onCommandLine(fs, "type"):
		return fmt.Errorf("%w: --type applies only with --dedupe-key", errUsage)
	case *sameContent < 0:
		return fmt.Errorf("%w: --same-content-window must not be negative, got %s", errUsage, *sameContent)
	case sel.Recipient == "" && onCommandLine(fs, "same-content-window"):
		return fmt.Errorf("%w: --same-content-window applies only with --recipient", errUsage)
	}
	conn, err := ch.open(ctx)
	if err != nil {
		return clickhouseUnreachable(err, ch.addr)
	}
	defer conn.Close()
	tl, err := audit.Load(ctx, conn, ch.database, sel)
	if err != nil {
		return clickhouseUnreachable(err, ch.addr)
	}
	if tl.Empty() {
		// Not a clean bill: a wrong id, database or tenant looks exactly
		// like this, so say so and fail.
		return fmt.Errorf("%s (database %s at %s)", tl.Nothing(), ch.database, ch.addr)
	}
	opts := audit.PrintOptions{Width: terminalWidth()}
	if sel.Recipient != "" {
		opts.SameContentWindow = *sameContent
	}
	return tl.Fprint(stdout, opts)
}

// defaultWidth is the width the timeline wraps at when COLUMNS is unset.
const defaultWidth = 100

// terminalWidth is COLUMNS when it is a positive number, else defaultWidth.
func terminalWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return defaultWidth
}

// clickhouseUnreachable turns a refused connection into a message naming
// the flag that points at ClickHouse and the port herald dev serves it on.
func clickhouseUnreachable(err error, addr string) error {
	if !errors.Is(err, syscall.ECONNREFUSED) && !strings.Contains(err.Error(), "connection refused") {
		return err
	}
	return fmt.Errorf("nothing answers at %s, the ClickHouse native address: point --clickhouse-addr (HERALD_CLICKHOUSE_ADDR) "+
		"at the ClickHouse the audit writer writes to; herald dev serves it on 127.0.0.1:%d (its --clickhouse-tcp-port): %w",
		addr, devClickHouseTCPPort, err)
}

// auditTime reads a time (RFC 3339, "2006-01-02 15:04:05" or "2006-01-02",
// UTC) or a duration before now ("72h").
func auditTime(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "-")); err == nil {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, time.DateTime, time.DateOnly} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a time (RFC 3339) nor a duration", s)
}
