package main

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/heraldhq/herald/internal/ops"
	"github.com/heraldhq/herald/processors/fallback"
	"github.com/heraldhq/herald/schemas"
)

// runFallback implements `herald fallback`: one instance of the fallback
// stage (processors/fallback) and its two forwarders (outcomes and
// receipts onto herald.fallback). It takes the route flags: the types with
// a chain (--fallback-chains) are the ones whose outcomes and receipts it
// forwards; give it the route stage's values.
func runFallback(ctx context.Context, args []string, _ io.Writer) error {
	fs := newFlagSet("fallback")
	var kf kafkaFlags
	kf.register(fs)
	var rf routeFlags
	rf.register(fs)
	var sf stageFlags
	sf.register(fs, "fallback", "herald-fallback", "herald.fallbackstate", "re-decides the retained input")
	var of opsFlags
	of.register(fs)
	recordFormat := formatFlag(fs, "record-format", "how the stage writes herald.decisions: v2 (Protocol Buffers, schemas/recordpb/records.proto) or v1 (JSON, for a rolling upgrade while a reader of an earlier herald that reads only JSON still runs)")
	markInterval := fs.Duration("mark-interval", time.Second, "how often each forwarder reads how far herald.outcomes or herald.receipts is committed and, once it has forwarded that far, writes its watermark to herald.fallback: "+
		"steps fire when both forwarders' watermarks pass their time, about this much after it when the forwarders keep up")
	positive(fs, "mark-interval", markInterval)
	// Kept so that a command line of an earlier herald still starts; route
	// has its own --timer-grace, which a shared config file also sets.
	fs.Duration("timer-grace", time.Second, "deprecated and ignored: steps no longer fire on the wall clock minus a grace but on the forwarders' watermarks (--mark-interval); herald route keeps its own --timer-grace")
	maxOpen := fs.Duration("max-open", 7*24*time.Hour, "how long a notification's chain is kept after its first record (its pending steps are then cancelled)")
	positive(fs, "max-open", maxOpen)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if onCommandLine(fs, "timer-grace") {
		slog.Warn("herald fallback ignores --timer-grace: its steps fire on the forwarders' watermarks (--mark-interval), never on the wall clock; remove the flag")
	}
	seeds, kopts, err := kf.connect()
	if err != nil {
		return err
	}
	if err := sf.check(); err != nil {
		return err
	}
	policy, err := rf.policy()
	if err != nil {
		return err
	}
	s, err := fallback.New(fallback.Options{
		Instance:     sf.runtime(seeds, kopts),
		Catalog:      kf.catalog(),
		Types:        chainedTypes(policy.Chains),
		MarkInterval: *markInterval,
		MaxOpen:      *maxOpen,
		RecordFormat: schemas.Format(*recordFormat),
	})
	if err != nil {
		return err
	}
	stop, err := of.serve(ops.Check{Name: "fallback stage and its forwarders (assigned and restored)", Ready: s.Ready, Warnings: s.Warnings})
	if err != nil {
		return err
	}
	defer stop()
	return s.Run(ctx)
}
