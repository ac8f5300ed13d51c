package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/replay"
	"github.com/heraldhq/herald/analytics/whatif"
)

// whatIfPrefix names the candidate policy's flags: every policy flag of
// herald dedupe and herald route again, --what-if-dedupe-window 1m, unset
// meaning "as in force".
const whatIfPrefix = "what-if-"

// whatIfFlags are herald replay --what-if's: the candidate policy (the
// prefixed flags and --what-if-config) and the report's shape.
type whatIfFlags struct {
	on      bool
	config  string
	until   string
	samples int
	json    bool
	// values holds the prefixed flags by policy flag name; "" is unset.
	values map[string]*string
	names  []string // policy flag names, in registration order
}

// policyFlagSet is a flag set of the policy flags alone (herald dedupe's and
// herald route's), its values where the policies are read from.
func policyFlagSet() (*flag.FlagSet, *policyFlags, *routeFlags) {
	fs := flag.NewFlagSet("what-if policy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var pf policyFlags
	pf.register(fs)
	var rf routeFlags
	rf.register(fs)
	takeChecks(fs) // policies() runs the same checks
	return fs, &pf, &rf
}

func (w *whatIfFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&w.on, "what-if", false, "re-run the window from --from (to --until) under the policy in force (the policy flags) and under a candidate "+
		"(the --what-if-* flags and --what-if-config), and report what would change; writes nothing")
	fs.StringVar(&w.config, "what-if-config", "", "with --what-if: a YAML file of candidate policy settings, keys as the policy flags without the prefix "+
		"(dedupe-window: 1m); other herald settings in it are ignored, the --what-if-* flags win over it")
	fs.StringVar(&w.until, "until", "", "with --what-if: end of the window, a time (RFC 3339) or a duration ago (default: the log's end)")
	fs.IntVar(&w.samples, "samples", 10, "with --what-if: how many changed notifications to list")
	fs.BoolVar(&w.json, "json", false, "with --what-if: print the report as JSON")
	atLeast(fs, "samples", &w.samples, 0)
	pfs, _, _ := policyFlagSet()
	w.values = map[string]*string{}
	pfs.VisitAll(func(f *flag.Flag) {
		w.names = append(w.names, f.Name)
		usage := "with --what-if: the candidate's --" + f.Name + " (default: as in force)"
		if isList(f) {
			usage = "with --what-if: the candidate's --" + f.Name + " (default: as in force; none: none at all)"
		}
		w.values[f.Name] = fs.String(whatIfPrefix+f.Name, "", usage)
	})
	addCheck(fs, func() error {
		_, err := w.candidate(fs, nil)
		return err
	})
}

// isList reports whether the policy flag f is a list (rates, digests,
// types): a string flag, whose candidate value "none" empties it.
func isList(f *flag.Flag) bool {
	_, dur := f.Value.(interface{ Get() any }).Get().(time.Duration)
	return !dur
}

// candidateValue is the text a candidate setting gives the policy flag f.
func candidateValue(f *flag.Flag, v string) string {
	if isList(f) && v == "none" {
		return ""
	}
	return v
}

// candidate is the candidate policy: the policy flags of fs (the policy in
// force), then the file's settings, then the prefixed flags. A bad value
// is named by its prefixed flag, or by the file and line.
func (w *whatIfFlags) candidate(fs *flag.FlagSet, file *configFile) (whatif.Policy, error) {
	pfs, pf, rf := policyFlagSet()
	var errs []error
	for _, name := range w.names {
		if f := fs.Lookup(name); f != nil {
			_ = pfs.Set(name, f.Value.String()) // a value fs holds is checked there
		}
	}
	where := map[string]string{} // policy flag → where its candidate value came from
	if file != nil {
		known := knownSettings()
		for _, s := range file.settings {
			f := pfs.Lookup(s.key)
			switch {
			case s.err != nil:
				errs = append(errs, fmt.Errorf("--what-if-config: %s: %s %v", file.where(s), s.key, s.err))
			case f != nil:
				where[s.key] = "--what-if-config " + file.where(s) + ": " + s.key
				if msg := setFlag(f, candidateValue(f, s.value)); msg != "" {
					errs = append(errs, fmt.Errorf("%s %s", where[s.key], msg))
				}
			case !known[s.key]:
				errs = append(errs, fmt.Errorf("--what-if-config %s: %q is not a setting of any herald command%s", file.where(s), s.key, suggest(s.key, known)))
			}
		}
	}
	for _, name := range w.names {
		if v := *w.values[name]; v != "" {
			where[name] = "--" + whatIfPrefix + name
			f := pfs.Lookup(name)
			if msg := setFlag(f, candidateValue(f, v)); msg != "" {
				errs = append(errs, badField(whatIfPrefix+name, "%s", msg))
			}
		}
	}
	if len(errs) > 0 {
		return whatif.Policy{}, errors.Join(errs...)
	}
	var p whatif.Policy
	var err1, err2 error
	p.Dedupe, err1 = pf.policy()
	p.Route, err2 = rf.policy()
	for _, err := range unjoin(errors.Join(err1, err2)) {
		var fe *fieldError
		if !errors.As(err, &fe) {
			errs = append(errs, fmt.Errorf("the what-if policy: %w", err))
		} else if w, ok := where[fe.field]; ok && w == "--"+whatIfPrefix+fe.field {
			errs = append(errs, badField(whatIfPrefix+fe.field, "%s", fe.msg))
		} else if ok {
			errs = append(errs, fmt.Errorf("%s %s", w, fe.msg))
		}
		// else the value in force, named by its own check
	}
	return p, errors.Join(errs...)
}

// changed reports whether the command line, the environment or the
// configuration file set any candidate setting.
func (w *whatIfFlags) changed() bool {
	if w.config != "" {
		return true
	}
	for _, v := range w.values {
		if *v != "" {
			return true
		}
	}
	return false
}

// runWhatIf implements `herald replay --what-if`.
func runWhatIf(ctx context.Context, fs *flag.FlagSet, w *whatIfFlags, seeds []string, kopts []kgo.Opt, kf kafkaFlags, pf policyFlags, rf routeFlags,
	ch clickhouseFlags, from string, warmup time.Duration, progress bool, stdout io.Writer) error {
	if !w.changed() {
		return fmt.Errorf("%w: --what-if needs a candidate policy: a --what-if-* flag (e.g. --what-if-dedupe-window 1m) or --what-if-config", errUsage)
	}
	now := time.Now()
	start, err := replay.ParseFrom(from, now)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var end time.Time
	if w.until != "" {
		if end, err = auditTime(w.until, now); err != nil {
			return fmt.Errorf("%w: --until: %v", errUsage, err)
		}
		if !start.Time.IsZero() && !end.After(start.Time) {
			return fmt.Errorf("%w: --until (%s) must be after --from (%s)", errUsage, end.UTC().Format(time.RFC3339), start)
		}
	}
	var file *configFile
	if w.config != "" {
		if file, err = loadConfigFile(w.config); err != nil {
			return fmt.Errorf("%w: --what-if-config: %v", errUsage, err)
		}
	}
	cand, err := w.candidate(fs, file)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var then whatif.Policy
	if then.Dedupe, err = pf.policy(); err != nil {
		return err
	}
	if then.Route, err = rf.policy(); err != nil {
		return err
	}
	o := replay.WhatIfOptions{Brokers: seeds, ClientOpts: kopts, Catalog: kf.catalog(), Then: then, Now: cand,
		From: start, Until: end, Warmup: warmup, Samples: w.samples}
	if ch.addr != "" {
		conn, err := ch.open(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		o.ClickHouse, o.Database = conn, ch.database
	}
	bar := newProgress("what-if", "records", progress)
	o.Progress = bar.Update
	rep, err := replay.WhatIf(ctx, o)
	bar.Finish()
	if err != nil {
		return err
	}
	if w.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.Print(stdout)
}
