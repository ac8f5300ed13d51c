package main

import (
	"context"
	"io"

	"github.com/heraldhq/herald/internal/ops"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
)

// runDedupe implements `herald dedupe`: one instance of the dedupe stage.
func runDedupe(ctx context.Context, args []string, _ io.Writer) error {
	fs := newFlagSet("dedupe")
	var kf kafkaFlags
	kf.register(fs)
	var pf policyFlags
	pf.register(fs)
	var sf stageFlags
	sf.register(fs, "dedupe", "herald-dedupe", "the seen-set", "re-decides the whole retained input against the restored seen-set")
	var of opsFlags
	of.register(fs)
	seenFormat := fs.String("seen-format", "v3", "how the stage writes herald.seen: v3 (a record per transaction and expiry bucket, schemas/seenpb/seen.proto), v2 (a record per key, for a rolling upgrade from a herald that reads no v3) or v1 (a record per key in JSON, from a herald that reads only JSON); all are read either way")
	recordFormat := formatFlag(fs, "record-format", "how the stage writes herald.decisions and herald.accepted: v2 (Protocol Buffers, schemas/recordpb/records.proto) or v1 (JSON, for a rolling upgrade while a reader of an earlier herald that reads only JSON still runs); readers of this version read both")
	addCheck(fs, func() error {
		if *seenFormat != "v1" && *seenFormat != "v2" && *seenFormat != "v3" {
			return badField("seen-format", "must be v1, v2 or v3, got %q", *seenFormat)
		}
		return nil
	})
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
	policy, err := pf.policy()
	if err != nil {
		return err
	}
	r, err := dedupe.New(dedupe.Options{
		Instance:     sf.runtime(seeds, kopts),
		Catalog:      kf.catalog(),
		Policy:       policy,
		SeenJSON:     *seenFormat == "v1",
		SeenPerKey:   *seenFormat != "v3",
		RecordFormat: schemas.Format(*recordFormat),
	})
	if err != nil {
		return err
	}
	stop, err := of.serve(ops.Check{Name: "dedupe stage (assigned and restored)", Ready: r.Ready, Warnings: r.Warnings})
	if err != nil {
		return err
	}
	defer stop()
	return r.Run(ctx)
}
