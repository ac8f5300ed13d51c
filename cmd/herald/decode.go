package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/heraldhq/herald/schemas"
)

// runDecode implements `herald decode seen`: one herald.seen value, either
// version, read from --file (stdin by default) and printed as indented
// JSON for humans, ids in hex. herald.seen/v2 is Protocol Buffers; every
// other herald record is JSON already.
//
//	kcat -C -t herald.seen -p 0 -o 41 -c 1 -e -f '%s' | herald decode seen
func runDecode(_ context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "seen" {
		return fmt.Errorf("%w: want 'herald decode seen' (the only binary record is herald.seen's)", errUsage)
	}
	fs := newFlagSet("decode seen")
	file := fs.String("file", "-", "the record's value, as bytes; - reads stdin")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	var b []byte
	var err error
	if *file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("decode seen: read --file: %w", err)
	}
	var e schemas.SeenEntry
	if err := schemas.Decode(b, &e); err != nil {
		return fmt.Errorf("%w: decode seen: %d bytes are not a herald.seen entry: %w", errUsage, len(b), err)
	}
	out, err := json.MarshalIndent(&e, "", "  ")
	if err != nil {
		return fmt.Errorf("decode seen: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "%s\n", out)
	return err
}
