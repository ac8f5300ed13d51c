package main

import (
	"context"
	"io"
	"time"

	"github.com/heraldhq/herald/internal/ops"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
)

// runRoute implements `herald route`: one instance of the route stage.
func runRoute(ctx context.Context, args []string, _ io.Writer) error {
	fs := newFlagSet("route")
	var kf kafkaFlags
	kf.register(fs)
	var rf routeFlags
	rf.register(fs)
	var sf stageFlags
	sf.register(fs, "route", "herald-route", "herald.route", "re-decides the retained input")
	var of opsFlags
	of.register(fs)
	recordFormat := formatFlag(fs, "record-format", "how the stage writes herald.decisions: v2 (Protocol Buffers, schemas/recordpb/records.proto) or v1 (JSON, for a rolling upgrade while a reader of an earlier herald that reads only JSON still runs)")
	grace := fs.Duration("timer-grace", time.Second, "timers also fire when the wall clock minus this reaches them (digest ends, quiet-hours ends)")
	positive(fs, "timer-grace", grace)
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
	s, err := route.New(route.Options{
		Instance:     sf.runtime(seeds, kopts),
		Catalog:      kf.catalog(),
		Policy:       policy,
		TimerGrace:   *grace,
		RecordFormat: schemas.Format(*recordFormat),
	})
	if err != nil {
		return err
	}
	stop, err := of.serve(ops.Check{Name: "route stage (devices and preferences read, assigned and restored)", Ready: s.Ready, Warnings: s.Warnings})
	if err != nil {
		return err
	}
	defer stop()
	return s.Run(ctx)
}
