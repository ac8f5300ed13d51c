package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/heraldhq/herald/bench/apiload"
)

// runBenchAPI implements `herald bench api`: load on a running `herald api`
// (package bench/apiload), every send a distinct notification unless
// --repeat, in the closed model (--clients) or the open one (--rate), for
// a time (--duration) or a number of sends (--sends), on one API instance
// or several in turn (--url a,b). It prints the report
// in plain words, or as JSON with --json; progress goes to the log. Sends
// that fail are counted in the report, not returned as an error.
//
//	HERALD_API_KEY=... herald bench api --url http://127.0.0.1:8080 --clients 64 --duration 20s
func runBenchAPI(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench api")
	url := fs.String("url", "", "the API's base URL, e.g. http://127.0.0.1:8080; several, comma separated, share the sends in turn (send n to the (n mod count)th)")
	key := fs.String("api-key", "", "API key sent as a Bearer token (prefer HERALD_API_KEY: a flag shows in the process list)")
	clients := fs.Int("clients", 0, "closed model: this many clients, each sending its next request when its last is answered")
	rate := fs.Int("rate", 0, "open model: sends a second on a fixed schedule, whatever the answers; latency counts from when a send fell due")
	maxInFlight := fs.Int("max-sends-in-flight", 1024, "open model: most sends in flight (and connections) at once")
	duration := fs.Duration("duration", 0, "how long sends are started; sends in flight at its end are awaited (0: 10s, or no limit with --sends)")
	sends := fs.Int("sends", 0, "end the run after this many sends (or at --duration if given, whichever comes first)")
	repeat := fs.Float64("repeat", 0, "share of sends, at least 0 and below 1, that repeat an earlier send's body and dedupeKey (answered as duplicates); above 0, every send carries a dedupeKey")
	prefer := fs.String("prefer", "", "Prefer header of every send, e.g. wait=10 (answered once the send's decisions are known)")
	run := fs.String("run", "", "label in every notification's key, so that runs on the same topics do not repeat each other (default: the start time)")
	recipients := fs.Int("recipients", 10000, "distinct recipients the sends cycle through")
	timeout := fs.Duration("timeout", 30*time.Second, "longest one send may take; one that runs out counts as an error")
	asJSON := fs.Bool("json", false, "print the report as JSON (latencies in nanoseconds) instead of plain words")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *duration == 0 && *sends == 0 {
		*duration = 10 * time.Second
	}
	if *run == "" {
		*run = time.Now().UTC().Format(time.RFC3339Nano)
	}
	o := apiload.Options{
		URL: *url, APIKey: *key, Run: *run, Clients: *clients, Rate: *rate, MaxInFlight: *maxInFlight,
		Duration: *duration, Sends: *sends, Repeat: *repeat, Prefer: *prefer, Recipients: *recipients, Timeout: *timeout,
	}
	if *maxInFlight < 1 || *recipients < 1 {
		return fmt.Errorf("%w: --max-sends-in-flight and --recipients must be positive", errUsage)
	}
	r, err := apiload.Run(ctx, o)
	if err != nil { // every bad option, a line each, as parseFlags lists them
		return fmt.Errorf("%w: %s", errUsage, strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(r)
	}
	_, err = fmt.Fprintln(stdout, r)
	return err
}
