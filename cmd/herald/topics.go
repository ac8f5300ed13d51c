package main

import (
	"context"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/heraldhq/herald/topics"
)

// runTopics implements `herald topics create|verify`.
//
//	create  makes every missing topic (idempotent), then reports drift;
//	        --fix-configs sets drifted configs back to the catalog's values;
//	        --segment-bytes sets segment.bytes on every topic (verify then
//	        checks it too).
//	verify  reports drift and exits 1 if there is any.
func runTopics(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "verify") {
		return fmt.Errorf("%w: want 'herald topics create' or 'herald topics verify'", errUsage)
	}
	verb := args[0]
	fs := newFlagSet("topics " + verb)
	var kf kafkaFlags
	kf.register(fs)
	fix := fs.Bool("fix-configs", false, "with create: set drifted topic configs back to the catalog's values")
	segmentBytes := fs.Int64("segment-bytes", 0, "segment.bytes of every topic (0: the broker's default, Kafka's is 1 GiB); for a broker whose default is small, such as herald's test broker (1 MiB)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *segmentBytes < 0 {
		return fmt.Errorf("%w: --segment-bytes must not be negative, got %d", errUsage, *segmentBytes)
	}
	cl, err := kf.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	cat := kf.catalog()
	if *segmentBytes > 0 {
		o := cat.Options()
		o.SegmentBytes = *segmentBytes
		cat = topics.New(o)
	}

	if verb == "create" {
		created, err := cat.Create(ctx, adm)
		for _, name := range created {
			fmt.Fprintf(stdout, "created %s\n", name)
		}
		if err != nil {
			return err
		}
	}
	drift, err := cat.Verify(ctx, adm)
	if err != nil {
		return err
	}
	if verb == "create" && *fix && len(drift) > 0 {
		if drift, err = cat.FixConfigs(ctx, adm, drift); err != nil {
			return err
		}
	}
	for _, d := range drift {
		fmt.Fprintf(stdout, "drift %s\n", d)
	}
	if len(drift) > 0 {
		return fmt.Errorf("%d topic(s) drift from the catalog", len(drift))
	}
	fmt.Fprintf(stdout, "ok: %d topics match the catalog\n", len(cat.Topics()))
	return nil
}
