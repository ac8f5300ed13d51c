// Command herald is the one binary of herald: every stage, tool and the
// embedded development setup is a subcommand.
//
//	herald dev                 run everything in one process (kfake, chDB, emulators)
//	herald id ...              print a canonical notification id
//	herald topics create|verify|delete
//	herald sink --channel C    deliver one channel's pushes (apns, fcm, webpush, feed, email)
//	herald emulate apns|fcm|smtp|webhook|webpush  a local APNs, FCM, SMTP server, webhook receiver or Web Push service
//
// Every flag can also be set from the environment: --brokers is
// HERALD_BROKERS, --state-dir is HERALD_STATE_DIR, and so on (upper case,
// dashes become underscores, HERALD_ prefix), and from the YAML file named
// by --config (HERALD_CONFIG), whose keys are flag names. The command line
// wins over the environment, the environment over the file (see flags.go;
// `herald config check --config FILE` checks a file).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sort"
	"syscall"
)

// command is one subcommand of herald.
type command struct {
	name    string
	summary string
	// run parses args (everything after the subcommand's name) and runs.
	// It writes results to stdout; logs go to slog.
	run func(ctx context.Context, args []string, stdout io.Writer) error
}

// commands lists every subcommand. Keep it sorted by name.
func commands() []command {
	cs := []command{
		{"api", "serve the HTTP API for producer services (notifications, devices, preferences)", runAPI},
		{"audit", "print the audit timeline of a notification, recipient or dedupe key (timeline)", runAudit},
		{"audit-writer", "copy requests, decisions, attempts and outcomes into ClickHouse, exactly once", runAuditWriter},
		{"bench", "measure dedupe throughput side by side: herald on Kafka, PostgreSQL, Redis; or load an API (bench api)", runBench},
		{"config", "check a configuration file: every bad setting, by name and line (herald config check --config FILE)", runConfig},
		{"clickhouse-server", "serve ClickHouse from the embedded chDB engine on loopback", runClickHouseServer},
		{"deadletters", "list the dead letters (filters, counts by reason), show one, or redrive a selection back to the stage it failed in, exactly once (list|show ID|redrive --reason WHY)", runDeadLetters},
		{"decode", "print a herald.seen, request, decision or accepted value (Protocol Buffers or JSON) as JSON for humans (decode seen|request|decision|accepted --file F, or stdin)", runDecode},
		{"dedupe", "run the dedupe stage (idempotency and windowed dedupe)", runDedupe},
		{"doctor", "check a running deployment against what herald depends on (replication, min.insync.replicas, the transaction state log, unclean leader election, topic configs, hanging transactions, lag, migrations): one line per check, exit 1 on a failure", runDoctor},
		{"dev", "run herald on its embedded defaults: kfake, chDB ClickHouse, emulators", runDev},
		{"emulate", "run a local provider emulator: apns (HTTP/2 over TLS, Apple's answers, fault injection), fcm (HTTP v1 and its token endpoint), smtp (an SMTP server keeping every message, with faults), webhook (a receiver verifying Standard Webhooks signatures) or webpush (a push service answering RFC 8030 errors)", runEmulate},
		{"fallback", "run the fallback stage: the later steps of each type's fallback chain (--fallback-chains), each fired at most once, when its condition holds", runFallback},
		{"id", "print the canonical notification id of (type, recipient, key)", runID},
		{"probe", "exit 0 when a URL answers 200 (the containers' healthcheck: herald probe http://127.0.0.1:9464/readyz)", runProbe},
		{"migrate", "create or upgrade herald's ClickHouse database (idempotent)", runMigrate},
		{"route", "run the route stage (rate limits, digests, preferences, quiet hours, fan-out to devices)", runRoute},
		{"replay", "re-run requests through the dedupe stage (or, with --stage route, accepted notifications through the route stage and herald.fallback through the fallback stage) in a sandbox and diff with the record; with --what-if, re-run a window under another policy and report what would change", runReplay},
		{"sink", "run a channel's sink (--channel apns|fcm|webpush|feed|email|webhook): deliver with a sent-set, safe retries and dead letters", runSink},
		{"topics", "create, verify or delete herald's Kafka topics (create|verify|delete)", runTopics},
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	return cs
}

// errUsage marks an error whose message already tells the user what to fix;
// main prints it and exits 2.
var errUsage = errors.New("usage")

func main() {
	level, err := logLevel(os.Getenv("HERALD_LOG_LEVEL"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "herald: %v\n", err)
		os.Exit(2)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 1 && args[0] == "help" { // herald help topics create: herald topics create -h
		return run(ctx, append(slices.Clone(args[1:]), "-h"), stdout, stderr)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		if len(args) == 2 && (args[1] == "-h" || args[1] == "--help" || args[1] == "help") && examples[c.name] == "" && printVerbsHelp(stderr, c.name) {
			return 0
		}
		err := c.run(ctx, args[1:], stdout)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "herald %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "herald %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "herald: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: herald <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-18s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'herald <command> -h' for a command's flags.")
}

// logLevel reads HERALD_LOG_LEVEL: empty is info; anything else must be a
// level slog reads (debug, info, warn, error, optionally +N or -N).
func logLevel(s string) (slog.Level, error) {
	var l slog.Level
	if s == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("HERALD_LOG_LEVEL=%q is not a log level: debug, info, warn or error (e.g. warn, or debug-4)", s)
	}
	return l, nil
}
