package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/sinks/deadletters"
	"github.com/heraldhq/herald/topics"
)

// runDeadLetters implements `herald deadletters list|show|redrive`:
//
//	list     the dead letters on herald.deadletters (filtered), and counts by reason
//	show ID  one dead letter: the record, its error, its input, its redrives,
//	         and its notification's audit timeline when ClickHouse answers
//	redrive  send a selection back to the stage it failed in, exactly once
//	         (--reason why; --by who, $USER by default; --dry-run)
//
// See sinks/deadletters for what is read and why redrive is exactly once.
func runDeadLetters(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "show" && args[0] != "redrive") {
		return fmt.Errorf("%w: want 'herald deadletters list', 'herald deadletters show ID' or 'herald deadletters redrive --reason WHY'", errUsage)
	}
	verb := args[0]
	fs := newFlagSet("deadletters " + verb)
	var kf kafkaFlags
	kf.register(fs)
	jsonOut := fs.Bool("json", false, "print JSON instead of words")
	switch verb {
	case "list":
		sel := selectionFlags(fs, true)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		f, err := sel()
		if err != nil {
			return err
		}
		return listDeadLetters(ctx, &kf, f, *jsonOut, stdout)
	case "show":
		var ch clickhouseFlags
		ch.optional = true
		ch.register(fs)
		id := fs.String("id", "", "the dead letter's id (<partition>-<offset>, as list prints); or give it as the argument")
		// The one word show takes is the id; any other is refused before
		// the settings are read.
		words, err := parseArgs(fs, args[1:])
		if err != nil {
			return err
		}
		for i, w := range words {
			if i > 0 || !deadletters.ValidID(w) {
				return fmt.Errorf("%w: unexpected argument %q: herald deadletters show takes one dead letter id (<partition>-<offset>, as list prints), or --id", errUsage, w)
			}
		}
		if err := applyAndCheck(fs); err != nil {
			return err
		}
		if len(words) == 1 {
			if *id != "" {
				return fmt.Errorf("%w: give the dead letter id once: as the argument or as --id", errUsage)
			}
			*id = words[0]
		}
		if !deadletters.ValidID(*id) {
			return fmt.Errorf("%w: --id %q is not a dead letter id: <partition>-<offset>, as herald deadletters list prints", errUsage, *id)
		}
		return showDeadLetter(ctx, &kf, &ch, *id, *jsonOut, stdout)
	}
	sel := selectionFlags(fs, false)
	reason := fs.String("reason", "", "why the dead letters can be sent now (required; audited)")
	by := fs.String("by", os.Getenv("USER"), "who redrives (audited; $USER by default)")
	dry := fs.Bool("dry-run", false, "print what would be redriven and skipped, and write nothing")
	batch := fs.Int("batch", 500, "dead letters per transaction")
	addCheck(fs, func() error {
		if *batch < 1 {
			return badField("batch", "must be at least 1, got %d", *batch)
		}
		return nil
	})
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	// Asked of each redrive, not of a configuration file (herald config
	// check runs the flag set's checks): so checked here.
	switch {
	case strings.TrimSpace(*reason) == "":
		return fmt.Errorf("%w: --reason is required: say why the dead letters can be sent now (it is audited)", errUsage)
	case strings.TrimSpace(*by) == "":
		return fmt.Errorf("%w: --by is empty and $USER is not set: say who redrives", errUsage)
	}
	f, err := sel()
	if err != nil {
		return err
	}
	seeds, opts, err := kf.connect()
	if err != nil {
		return err
	}
	rd := deadletters.Redrive{ClientOpts: append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...), Catalog: kf.catalog(),
		Filter: f, By: *by, Reason: *reason, DryRun: *dry, Batch: *batch}
	if !*jsonOut {
		rd.Progress = func(done, total int) { fmt.Fprintf(stdout, "committed: %d of %d redriven\n", done, total) }
	}
	rep, err := rd.Run(ctx)
	if err != nil {
		return err
	}
	if *jsonOut {
		return writeJSONTo(stdout, rep)
	}
	verbWord := "redriven"
	if rep.DryRun {
		verbWord = "would be redriven (dry run: nothing written)"
	}
	fmt.Fprintf(stdout, "redrive %s by %s: %d %s, %d skipped\n", rep.ID, *by, len(rep.Redriven), verbWord, len(rep.Skipped))
	for _, l := range rep.Redriven {
		if l.Kind == deadletters.KindStage {
			fmt.Fprintf(stdout, "  %s  input %s back to %s, which could not write its outputs: %s\n", l.ID, l.Source, l.Stage, l.Reason)
			continue
		}
		fmt.Fprintf(stdout, "  %s  delivery %s to %s, failed at attempt %d: %s\n", l.ID, l.DeliveryID, l.Stage, l.Attempts, l.Reason)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(stdout, "  skipped %s: %s\n", s.Letter.ID, s.Why)
	}
	return nil
}

// selectionFlags registers the filters of list and redrive and returns
// the function that reads them after parsing.
func selectionFlags(fs *flag.FlagSet, list bool) func() (deadletters.Filter, error) {
	var f deadletters.Filter
	fs.StringVar(&f.Stage, "stage", "", "only dead letters of this stage: sink.<channel>, sink (every sink), dedupe, route")
	fs.StringVar(&f.Channel, "channel", "", "only this channel: "+strings.Join(topics.SinkChannels, ", "))
	fs.StringVar(&f.Class, "class", "", "only this class: permanent, exhausted, unreadable, unwritable, other")
	fs.StringVar(&f.Reason, "error", "", "only dead letters whose reason contains this text (case-insensitive)")
	fs.StringVar(&f.Tenant, "tenant", "", "only this tenant")
	fs.StringVar(&f.Type, "type", "", "only this notification type")
	ids := fs.String("id", "", "only these dead letters (comma-separated ids, as list prints)")
	since := fs.String("since", "", "only dead letters from this time (RFC 3339, or 2006-01-02) or this long ago (72h)")
	until := fs.String("until", "", "only dead letters before this time (default now)")
	if list {
		fs.StringVar(&f.Redriven, "redriven", "", "yes: only those redriven; no: only those never redriven")
	}
	return func() (deadletters.Filter, error) {
		now := time.Now()
		var err error
		if *since != "" {
			if f.Since, err = auditTime(*since, now); err != nil {
				return f, fmt.Errorf("%w: --since: %v", errUsage, err)
			}
		}
		if *until != "" {
			if f.Until, err = auditTime(*until, now); err != nil {
				return f, fmt.Errorf("%w: --until: %v", errUsage, err)
			}
		}
		for _, id := range strings.Split(*ids, ",") {
			if id = strings.TrimSpace(id); id != "" {
				f.IDs = append(f.IDs, id)
			}
		}
		if err := f.Check(); err != nil {
			return f, fmt.Errorf("%w: %v", errUsage, err)
		}
		return f, nil
	}
}

func readDeadLetters(ctx context.Context, kf *kafkaFlags, f deadletters.Filter) (*deadletters.Set, error) {
	seeds, opts, err := kf.connect()
	if err != nil {
		return nil, err
	}
	return deadletters.Read(ctx, kf.catalog().Name(topics.DeadLetters), f, append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
}

func listDeadLetters(ctx context.Context, kf *kafkaFlags, f deadletters.Filter, jsonOut bool, stdout io.Writer) error {
	set, err := readDeadLetters(ctx, kf, f)
	if err != nil {
		return err
	}
	letters := set.Select(f)
	counts := deadletters.Counts(letters)
	if jsonOut {
		return writeJSONTo(stdout, map[string]any{"deadLetters": nonNil(letters), "counts": nonNil(counts)})
	}
	if len(letters) == 0 {
		fmt.Fprintln(stdout, "no dead letters")
		return nil
	}
	for _, l := range letters {
		fmt.Fprintln(stdout, letterLine(l))
	}
	noun := "dead letters"
	if len(letters) == 1 {
		noun = "dead letter"
	}
	fmt.Fprintf(stdout, "\n%d %s; by reason:\n", len(letters), noun)
	for _, c := range counts {
		fmt.Fprintf(stdout, "  %6d  %s  %s  %s", c.Letters, c.Stage, c.Class, c.Reason)
		if c.Redriven > 0 {
			fmt.Fprintf(stdout, " (%d redriven)", c.Redriven)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// letterLine is one dead letter in words.
func letterLine(l *deadletters.Letter) string {
	s := fmt.Sprintf("%s  %s  %s  %s", l.ID, l.At.Format("2006-01-02T15:04:05.000Z"), l.Stage, l.Class)
	switch l.Kind {
	case deadletters.KindDelivery:
		s += fmt.Sprintf("  %s/%s to %s, delivery %s, failed at attempt %d: %s", l.Tenant, l.Type, l.Recipient, l.DeliveryID, l.Attempts, l.Reason)
	default:
		s += fmt.Sprintf("  %s (input %s)", l.Reason, l.Source)
	}
	for _, m := range l.Redrives {
		s += fmt.Sprintf("; redriven by %s at %s: %s", m.By, m.At.Format(time.RFC3339), m.Reason)
	}
	return s
}

func showDeadLetter(ctx context.Context, kf *kafkaFlags, ch *clickhouseFlags, id string, jsonOut bool, stdout io.Writer) error {
	set, err := readDeadLetters(ctx, kf, deadletters.Filter{IDs: []string{id}})
	if err != nil {
		return err
	}
	l := set.Get(id)
	if l == nil {
		return fmt.Errorf("no dead letter %s on %s (it may be past the topic's retention)", id, kf.catalog().Name(topics.DeadLetters))
	}
	var tl *audit.Timeline
	var tlErr error
	if l.NotificationID != "" && len(ch.addrs()) > 0 {
		tl, tlErr = loadTimeline(ctx, ch, l)
	}
	if jsonOut {
		out := map[string]any{"deadLetter": l, "input": l.Input()}
		if tl != nil {
			out["timeline"] = tl.Events()
		}
		return writeJSONTo(stdout, out)
	}
	fmt.Fprintln(stdout, letterLine(l))
	fmt.Fprintf(stdout, "error: %s (class %s)\n", l.Reason, l.Class)
	if in := l.Input(); in != nil {
		b, _ := json.MarshalIndent(in, "", "  ")
		fmt.Fprintf(stdout, "input:\n%s\n", b)
	}
	if len(l.Redrives) == 0 {
		fmt.Fprintln(stdout, "redrives: none")
	}
	for _, m := range l.Redrives {
		fmt.Fprintf(stdout, "redriven by %s at %s (redrive %s): %s\n", m.By, m.At.Format(time.RFC3339), m.Redrive, m.Reason)
	}
	switch {
	case tl != nil:
		fmt.Fprintln(stdout, "timeline:")
		return tl.Print(stdout)
	case tlErr != nil:
		fmt.Fprintf(stdout, "timeline: unavailable: %v\n", tlErr)
	case l.NotificationID != "":
		fmt.Fprintln(stdout, "timeline: give --clickhouse-addr to see it")
	}
	return nil
}

func loadTimeline(ctx context.Context, ch *clickhouseFlags, l *deadletters.Letter) (*audit.Timeline, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := ch.open(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return audit.Load(ctx, conn, ch.database, audit.Selector{NotificationID: l.NotificationID, Tenant: l.Tenant})
}

func writeJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
