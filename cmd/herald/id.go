package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/heraldhq/herald/identity"
)

// runID prints one id and a newline, nothing else:
//
//	herald id --type T --recipient R --key '{"invoice":"inv_2201"}'
//	    the notification id of (T, R, key); --key '{}' is the empty key
//	herald id --tenant X --type T --recipient R --dedupe-key D
//	    the id derived from a dedupeKey (identity.DedupeID)
//	herald id --tenant X --type T --recipient R --idempotency-key I
//	    the id derived from an idempotencyKey (identity.IdempotencyID)
//
// With both --dedupe-key and --idempotency-key the dedupe key wins, as it
// does for a send. --key cannot be combined with either.
func runID(_ context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("id")
	typ := fs.String("type", "", "notification type, e.g. invoice.paid (required)")
	recipient := fs.String("recipient", "", "recipient id (required)")
	key := fs.String("key", "", `notification key, a JSON object of string or number values, e.g. '{"invoice":"inv_2201"}'`)
	tenant := fs.String("tenant", "", "tenant (required with --dedupe-key or --idempotency-key)")
	dedupeKey := fs.String("dedupe-key", "", "print the id derived from this dedupeKey instead (with --idempotency-key too, the dedupe key wins, as in a send)")
	idempotencyKey := fs.String("idempotency-key", "", "print the id derived from this idempotencyKey instead")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *typ == "" {
		return fmt.Errorf("%w: missing --type", errUsage)
	}
	if *recipient == "" {
		return fmt.Errorf("%w: missing --recipient", errUsage)
	}

	var id string
	switch {
	case *dedupeKey != "" || *idempotencyKey != "":
		if *key != "" {
			return fmt.Errorf("%w: --key cannot be combined with --dedupe-key or --idempotency-key", errUsage)
		}
		if *tenant == "" {
			return fmt.Errorf("%w: missing --tenant (required with --dedupe-key or --idempotency-key)", errUsage)
		}
		if *dedupeKey != "" {
			id = identity.DedupeID(*tenant, *typ, *recipient, *dedupeKey)
		} else {
			id = identity.IdempotencyID(*tenant, *typ, *recipient, *idempotencyKey)
		}
	default:
		if *key == "" {
			return fmt.Errorf("%w: missing --key (a JSON object; --key '{}' for the empty key), or --dedupe-key/--idempotency-key", errUsage)
		}
		if onCommandLine(fs, "tenant") {
			return fmt.Errorf("%w: --tenant applies only with --dedupe-key or --idempotency-key: the notification id does not include the tenant", errUsage)
		}
		k, err := identity.ParseKey(*key)
		if err != nil {
			return fmt.Errorf("%w: --key: %v", errUsage, err)
		}
		if id, err = identity.NotificationID(*typ, *recipient, k); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	_, err := fmt.Fprintln(stdout, id)
	return err
}

// onCommandLine reports whether the flag name was given on the command
// line (not merely inherited from the environment or the file, which
// other commands share: HERALD_TENANT, HERALD_TYPE).
func onCommandLine(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
