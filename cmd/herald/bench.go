package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/bench"
	"github.com/heraldhq/herald/internal/kafkacompress"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
)

// runBench implements `herald bench`: the dedupe decision throughput of
// herald's stage on Kafka, of the seed's PostgreSQL design and of Redis
// SET NX PX, side by side on one generated stream. A backend whose address
// is empty is skipped. The table goes to stdout; progress to the log.
//
//	herald bench --brokers 127.0.0.1:39092 --postgres postgres://... --redis 127.0.0.1:36379
func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "api" {
		return runBenchAPI(ctx, args[1:], stdout)
	}
	fs := newFlagSet("bench")
	d := bench.DefaultStreamOptions()
	brokers := fs.String("brokers", "", "Kafka bootstrap brokers, comma separated; empty skips herald's backend")
	postgres := fs.String("postgres", "", "PostgreSQL DSN, e.g. postgres://user@127.0.0.1:5432/db (server settings ride along: ?synchronous_commit=off); empty skips the seed design's backend")
	redisAddr := fs.String("redis", "", "Redis address host:port; empty skips the Redis backend")
	requests := fs.Int("requests", d.Requests, "requests in the stream")
	ratio := fs.Float64("repeat-ratio", d.RepeatRatio, "share of the requests that repeat an earlier one, in [0, 1)")
	seed := fs.Uint64("seed", d.Seed, "seed of the stream (the same seed gives the same stream)")
	txn := fs.String("txn-records", "100,1000,5000", "most records per transaction of the dedupe stage, comma separated: one run each")
	instances := fs.String("instances", "1", "stage instances (one group, in this process) deciding the stream, comma separated: one run each with every --txn-records value")
	compression := fs.String("compression", kafkacompress.Default, "codecs of the stage's and the stream's producers, comma separated ("+strings.Join(kafkacompress.Names, ", ")+"): one run each with every --txn-records value")
	formats := fs.String("formats", string(schemas.FormatBinary), "formats of the stream's requests and of the stage's decisions and accepted notifications, comma separated (v2: Protocol Buffers, v1: JSON): one run each with every --txn-records value, and one tasks-only row each")
	interval := fs.Duration("batch-interval", 100*time.Millisecond, "longest a stage transaction collects records")
	partitions := fs.Int("partitions", 4, "partitions of every benchmark topic")
	replication := fs.Int("replication", 1, "replication factor of every benchmark topic")
	ceiling := fs.Bool("ceiling", false, "also run a bare exactly-once copy loop (no herald code) on the same topics for each codec and --txn-records value: what the broker carries, beside what the stage decides")
	segmentBytes := fs.Int64("segment-bytes", 1<<30, "segment.bytes of every benchmark topic: Kafka's default, 1 GiB, whatever the broker's (herald's test broker rolls at 1 MiB); 0 keeps the broker's")
	window := fs.Duration("window", time.Hour, "dedupe window (the stage's default window and Redis's PX); must outlast the run, and with --stream-step the furthest repeat's lag in stream time")
	ttl := fs.Duration("idempotency-ttl", time.Duration(dedupe.DefaultPolicy().IdempotencyTTLMs)*time.Millisecond, "idempotency TTL of the stage; with --stream-step it must outlast the furthest repeat's lag in stream time")
	step := fs.Duration("stream-step", 0, "stream time from one request to the next: 0 stamps each with the time it is produced (nothing expires in a run); e.g. 1s stamps the stream a second apart up to now, so that the stage expires and tombstones its keys as one that has run for days (with --window 2h --idempotency-ttl 2h)")
	clientBatch := fs.Int("client-batch", 1000, "statements per pgx.Batch, rows per PostgreSQL unnest statement and commands per Redis pipeline in the batched variants")
	conns := fs.Int("conns", 1, "PostgreSQL and Redis connections, each sending its share of the stream (split by dedupe scope)")
	timeout := fs.Duration("timeout", 10*time.Minute, "longest one stage run may take")
	markdown := fs.Bool("markdown", false, "print a Markdown table (for BENCHMARKS.md) instead of a plain one")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (every backend's client side and herald's stage, which runs in this process) to this file, for go tool pprof")
	rounds := fs.Int("rounds", 1, "measure every backend this many times, in turn (round 1 measures each, then round 2...), and report the median round with the range: a shared host's speed drifts between runs")
	progress := fs.Bool("progress", false, "draw a progress bar (backends measured) on stderr even when it is not a terminal")
	atLeast(fs, "rounds", rounds, 1)
	atLeast(fs, "requests", requests, 1)
	atLeast(fs, "client-batch", clientBatch, 1)
	atLeast(fs, "conns", conns, 1)
	atLeast(fs, "partitions", partitions, 1)
	atLeast(fs, "replication", replication, 1)
	atLeast(fs, "segment-bytes", segmentBytes, 0)
	addCheck(fs, func() error {
		var errs []error
		if !(*ratio >= 0 && *ratio < 1) {
			errs = append(errs, badField("repeat-ratio", "must be in [0, 1), got %v", *ratio))
		}
		if *step < 0 {
			errs = append(errs, badField("stream-step", "must not be negative, got %v", *step))
		}
		for _, d := range []struct {
			name string
			v    time.Duration
		}{{"window", *window}, {"idempotency-ttl", *ttl}} {
			if d.v < time.Millisecond {
				errs = append(errs, badField(d.name, "must be at least 1ms, got %v", d.v))
			}
		}
		return errors.Join(errs...)
	})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := bench.Config{Stream: d, Rounds: *rounds}
	cfg.Stream.Requests, cfg.Stream.RepeatRatio, cfg.Stream.Seed, cfg.Stream.Step = *requests, *ratio, *seed, *step
	if seeds := benchSplit(*brokers); len(seeds) > 0 {
		sizes, err := parsePositives("txn-records", *txn)
		if err != nil {
			return err
		}
		counts, err := parsePositives("instances", *instances)
		if err != nil {
			return err
		}
		codecs := benchSplit(*compression)
		for _, c := range codecs {
			if _, err := kafkacompress.Codec(c); err != nil {
				return fmt.Errorf("%w: --compression: %v", errUsage, err)
			}
		}
		var fmts []schemas.Format
		for _, name := range benchSplit(*formats) {
			f, err := schemas.ParseFormat(name)
			if err != nil {
				return fmt.Errorf("%w: --formats: %v", errUsage, err)
			}
			fmts = append(fmts, f)
		}
		policy := dedupe.DefaultPolicy()
		policy.DefaultWindowMs, policy.IdempotencyTTLMs = window.Milliseconds(), ttl.Milliseconds()
		cfg.Kafka = &bench.KafkaOptions{
			Brokers: seeds, Partitions: int32(*partitions), Replication: int16(*replication),
			TxnRecords: sizes, Compression: codecs, Instances: counts, BatchInterval: *interval, SegmentBytes: *segmentBytes, Ceiling: *ceiling, Policy: policy, Timeout: *timeout,
			Formats: fmts,
		}
	}
	if *postgres != "" {
		cfg.Postgres = &bench.PostgresOptions{DSN: *postgres, Batch: *clientBatch, Conns: *conns}
	}
	if *redisAddr != "" {
		cfg.Redis = &bench.RedisOptions{Addr: *redisAddr, Batch: *clientBatch, Conns: *conns, Window: *window}
	}
	if cfg.Kafka == nil && cfg.Postgres == nil && cfg.Redis == nil {
		return fmt.Errorf("%w: nothing to measure: set --brokers (HERALD_BROKERS), --postgres (HERALD_POSTGRES) or --redis (HERALD_REDIS)", errUsage)
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: --cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: --cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	bar := newProgress("bench", "backend runs", *progress)
	cfg.Progress = bar.Update
	rep, err := bench.Run(ctx, cfg)
	bar.Finish()
	if rep.Stream != nil {
		fmt.Fprintf(stdout, "stream: %s\nhost: %s\n\n", rep.Stream, rep.Host())
	}
	write := bench.WriteTable
	if *markdown {
		write = bench.WriteMarkdown
	}
	if len(rep.Rows) > 0 {
		if werr := write(stdout, rep.Rows); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

func benchSplit(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parsePositives parses the comma-separated list of positive integers
// given to --flag.
func parsePositives(flag, s string) ([]int, error) {
	var out []int
	for _, p := range benchSplit(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: --%s: %q is not a positive integer", errUsage, flag, p)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: --%s is empty", errUsage, flag)
	}
	return out, nil
}
