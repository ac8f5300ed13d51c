package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
)

// decodable are the records `herald decode` reads, by the name it takes:
// those with a binary version (Protocol Buffers, see package schemas).
var decodable = map[string]struct {
	topic string
	new   func() schemas.Record
}{
	"seen":     {"herald.seen", func() schemas.Record { return new(schemas.SeenEntry) }},
	"request":  {"herald.requests", func() schemas.Record { return new(schemas.Request) }},
	"decision": {"herald.decisions", func() schemas.Record { return new(schemas.Decision) }},
	"accepted": {"herald.accepted", func() schemas.Record { return new(schemas.Accepted) }},
}

// runDecode implements `herald decode seen|request|decision|accepted`:
// one value of that record, either version, read from --file (stdin by
// default) and printed as indented JSON for humans, its "schema" naming
// the version read (ids of a herald.seen/v2 entry in hex). The v2
// records are Protocol Buffers; every other herald record is JSON
// already. `herald decode seen-batch` reads a herald.seen/v3 record (keyed
// "bucket/…" or "clock"): its times and its entries.
//
//	kcat -C -t herald.seen -p 0 -o 41 -c 1 -e -f '%s' | herald decode seen
//	kcat -C -t herald.decisions -p 3 -o 7 -c 1 -e -f '%s' | herald decode decision
func runDecode(_ context.Context, args []string, stdout io.Writer) error {
	const usage = "want 'herald decode seen|seen-batch|request|decision|accepted'"
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, usage)
	}
	rec, ok := decodable[args[0]]
	if args[0] == "seen-batch" { // herald.seen/v3: a bucket or clock record
		rec, ok = decodable["seen"], true
	}
	if !ok {
		return fmt.Errorf("%w: %s, got %q", errUsage, usage, args[0])
	}
	fs := newFlagSet("decode " + args[0])
	file := fs.String("file", "-", "the record's value, as bytes; - reads stdin")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	var b []byte
	var err error
	if *file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("decode %s: read --file: %w", args[0], err)
	}
	var r any = rec.new()
	if args[0] == "seen-batch" {
		r, err = dedupe.DecodeSeenBatch(b)
	} else {
		err = schemas.Decode(b, r.(schemas.Record))
	}
	if err != nil {
		return fmt.Errorf("%w: decode %s: %d bytes are not a %s value: %w", errUsage, args[0], len(b), rec.topic, err)
	}
	out, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("decode %s: %w", args[0], err)
	}
	_, err = fmt.Fprintf(stdout, "%s\n", out)
	return err
}
