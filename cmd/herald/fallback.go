package main

import (
	"context"
	"io"
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
	grace := fs.Duration("timer-grace", time.Second, "steps also fire when the wall clock minus this reaches them; a receipt read later than this after a step's time comes too late to cancel it")
	positive(fs, "timer-grace", grace)
	maxOpen := fs.Duration("max-open", 7*24*time.Hour, "how long a notification's chain is kept after its first record (its pending steps are then cancelled)")
	positive(fs, "max-open", maxOpen)
	if err := parseFlags(fs, args); err != nil {
		return err
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
		TimerGrace:   *grace,
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
