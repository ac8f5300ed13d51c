package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/replay"
	"github.com/heraldhq/herald/processors/fallback"
	"github.com/heraldhq/herald/processors/route"
)

// runReplay implements `herald replay --from <time|offset>`: it re-runs the
// requests topic through the dedupe stage's code in a sandbox (nothing is
// produced, nothing is sent) and prints every decision that differs from
// the audit record. It exits 1 when any does. The policy flags must match
// the live `herald dedupe`.
//
// With --what-if it re-runs the window through both stages under the
// policy in force and under a candidate (the --what-if-* flags and
// --what-if-config) and reports what would change (runWhatIf).
func runReplay(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("replay")
	var kf kafkaFlags
	kf.register(fs)
	var pf policyFlags
	pf.register(fs)
	ch := clickhouseFlags{optional: true} // --what-if reads the record only when given one
	ch.register(fs)
	var rf routeFlags
	rf.register(fs)
	var wf whatIfFlags
	wf.register(fs)
	stageName := fs.String("stage", "dedupe", "the stage to replay: dedupe (requests, compared with the ClickHouse audit) or route "+
		"(accepted notifications with devices and preferences, compared with herald.decisions; the route policy flags must match the live herald route; "+
		"the fallback chains' later steps are replayed too, as with --stage fallback) "+
		"or fallback (herald.fallback: the chains' plans, outcomes, receipts and the forwarders' watermarks, compared with the fallback stage's decisions on herald.decisions)")
	fallbackGroup := fs.String("fallback-group", "herald-fallback", "the live fallback stage's consumer group (its --group): how far it has read herald.fallback, "+
		"so that a step the replay decides from records it has not read yet is reported as pending, not as a difference")
	from := fs.String("from", "start", "where to start comparing: start, a time (RFC 3339), a duration ago (24h), offset:N or offset:P=N,P=N")
	warmup := fs.Duration("warmup", 0, "read this long before --from, without comparing, to rebuild the seen-set (default: the longest window or TTL; "+
		"with --what-if, the longest dedupe window, TTL, rate or digest window of either policy)")
	progress := fs.Bool("progress", false, "draw a progress bar on stderr even when it is not a terminal")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	seeds, kopts, err := kf.connect()
	if err != nil {
		return err
	}
	if wf.on {
		if onCommandLine(fs, "stage") {
			return fmt.Errorf("%w: --what-if re-runs both stages, dedupe then route: leave out --stage", errUsage)
		}
		return runWhatIf(ctx, fs, &wf, seeds, kopts, kf, pf, rf, ch, *from, *warmup, *progress, stdout)
	}
	if wf.changed() || wf.until != "" || wf.json {
		return fmt.Errorf("%w: --what-if-*, --until and --json apply only with --what-if", errUsage)
	}
	if len(ch.addrs()) == 0 {
		return fmt.Errorf("%w: --clickhouse-addr is empty: herald replay compares with the audit there", errUsage)
	}
	switch *stageName {
	case "dedupe":
	case "route":
		return replayRoute(ctx, seeds, kopts, kf, rf, *fallbackGroup, stdout)
	case "fallback":
		return replayFallback(ctx, seeds, kopts, kf, *fallbackGroup, stdout)
	default:
		return fmt.Errorf("%w: --stage must be dedupe, route or fallback, got %q", errUsage, *stageName)
	}
	start, err := replay.ParseFrom(*from, time.Now())
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	policy, err := pf.policy()
	if err != nil {
		return err
	}
	conn, err := ch.open(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()

	o := replay.Options{
		Brokers:    seeds,
		ClientOpts: kopts,
		Catalog:    kf.catalog(),
		ClickHouse: conn,
		Database:   ch.database,
		Policy:     policy,
		From:       start,
		Warmup:     *warmup,
	}
	bar := newProgress("replay", "records", *progress)
	o.Progress = bar.Update
	rep, err := replay.Run(ctx, o)
	bar.Finish()
	if err != nil {
		return err
	}
	for _, d := range rep.Differences {
		fmt.Fprintf(stdout, "differs: %s\n", d)
	}
	fmt.Fprintf(stdout, "replayed %d request(s) in %d partition(s), compared %d decision(s) from %s with the audit in %s: %d difference(s)\n",
		rep.Read, rep.Partitions, rep.Compared, rep.From, ch.database, len(rep.Differences))
	if len(rep.Differences) > 0 {
		return fmt.Errorf("%d decision(s) differ from the audit record", len(rep.Differences))
	}
	return nil
}

// replayRoute implements `herald replay --stage route`: the route stage's
// decisions, then the fallback stage's, which decides the later steps of
// the chains the route stage plans (the issue of fallback chains promised
// every step replayed by --stage route).
func replayRoute(ctx context.Context, seeds []string, kopts []kgo.Opt, kf kafkaFlags, rf routeFlags, fallbackGroup string, stdout io.Writer) error {
	policy, err := rf.policy()
	if err != nil {
		return err
	}
	rep, err := route.Replay(ctx, seeds, kf.catalog(), policy, kopts...)
	if err != nil {
		return err
	}
	for _, d := range rep.Differences {
		fmt.Fprintf(stdout, "differs: %s\n", d)
	}
	fmt.Fprintf(stdout, "replayed %d accepted notification(s) through the route stage, compared %d decision(s) (%d from timers still pending at the log's end) with herald.decisions: %d difference(s)\n",
		rep.Notifications, rep.Compared, rep.Pending, len(rep.Differences))
	if rep.Groups > 0 {
		fmt.Fprintf(stdout, "left %d group notification(s) (tag, segment, all) to their members' notifications, replayed above\n", rep.Groups)
	}
	ferr := replayFallback(ctx, seeds, kopts, kf, fallbackGroup, stdout)
	if len(rep.Differences) > 0 {
		return errors.Join(fmt.Errorf("%d route decision(s) differ from the live ones", len(rep.Differences)), ferr)
	}
	return ferr
}

// replayFallback implements `herald replay --stage fallback`.
func replayFallback(ctx context.Context, seeds []string, kopts []kgo.Opt, kf kafkaFlags, group string, stdout io.Writer) error {
	rep, err := fallback.Replay(ctx, seeds, kf.catalog(), group, kopts...)
	if err != nil {
		return err
	}
	for _, d := range rep.Differences {
		fmt.Fprintf(stdout, "differs: %s\n", d)
	}
	fmt.Fprintf(stdout, "replayed %d record(s) of herald.fallback through the fallback stage, compared %d step decision(s) with herald.decisions: %d difference(s)",
		rep.Records, rep.Compared, len(rep.Differences))
	if rep.Pending > 0 {
		fmt.Fprintf(stdout, "; %d decided from records the live stage (group %s) had not read yet, not compared", rep.Pending, group)
	}
	fmt.Fprintln(stdout)
	if len(rep.Differences) > 0 {
		return fmt.Errorf("%d fallback decision(s) differ from the live ones", len(rep.Differences))
	}
	return nil
}
