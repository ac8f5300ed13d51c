package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/heraldhq/herald/topics"
)

// runTopics implements `herald topics create|verify|delete`.
//
//	create  makes every missing topic (idempotent), then reports drift;
//	        --fix-configs sets drifted configs back to the catalog's values;
//	        --segment-bytes sets segment.bytes on every topic (verify then
//	        checks it too).
//	verify  reports drift and exits 1 if there is any.
//	delete  deletes every topic of the catalog that exists, records and
//	        all (idempotent); --confirm must repeat --topic-prefix.
func runTopics(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "verify" && args[0] != "delete") {
		return fmt.Errorf("%w: want 'herald topics create', 'herald topics verify' or 'herald topics delete'", errUsage)
	}
	verb := args[0]
	fs := newFlagSet("topics " + verb)
	var kf kafkaFlags
	kf.register(fs)
	var fix *bool
	var segmentBytes *int64
	var confirm *string
	if verb == "delete" {
		confirm = fs.String("confirm", "", "the topic prefix again (--topic-prefix's value, \"\" for none): delete removes every topic of the catalog with all its records")
	} else {
		fix = fs.Bool("fix-configs", false, "with create: set drifted topic configs back to the catalog's values")
		segmentBytes = fs.Int64("segment-bytes", 0, "segment.bytes of every topic (0: the broker's default, Kafka's is 1 GiB); for a broker whose default is small, such as herald's test broker (1 MiB)")
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if verb == "delete" {
		return deleteTopics(ctx, fs, &kf, *confirm, stdout)
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

// deleteTopics implements `herald topics delete`: it refuses unless
// --confirm was given and repeats the prefix, so a deployment's topics are
// never deleted by a command line meant for another one (or none).
func deleteTopics(ctx context.Context, fs *flag.FlagSet, kf *kafkaFlags, confirm string, stdout io.Writer) error {
	cat := kf.catalog()
	prefix := cat.Options().Prefix
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "confirm" })
	if !given || confirm != prefix {
		return fmt.Errorf("%w: --confirm must repeat the topic prefix %q: delete removes every topic of the catalog (%s, %s and %d more) with all its records",
			errUsage, prefix, cat.Name(topics.Requests), cat.Name(topics.Seen), len(cat.Topics())-2)
	}
	cl, err := kf.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	deleted, err := cat.Delete(ctx, kadm.NewClient(cl))
	for _, name := range deleted {
		fmt.Fprintf(stdout, "deleted %s\n", name)
	}
	if err != nil {
		return err
	}
	if n := len(cat.Topics()); len(deleted) < n {
		fmt.Fprintf(stdout, "ok: %d of the catalog's %d topics deleted; the other %d did not exist\n", len(deleted), n, n-len(deleted))
	} else {
		fmt.Fprintf(stdout, "ok: all %d topics of the catalog deleted\n", n)
	}
	return nil
}
