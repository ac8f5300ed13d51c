package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/processors/dedupe"
)

// policyFlags are the dedupe policy flags. herald dedupe decides with them;
// herald api (explain) and herald replay must be given the same values.
type policyFlags struct {
	window, ttl time.Duration
	typeWindows string
	skew        time.Duration
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	d := dedupe.DefaultPolicy()
	fs.DurationVar(&p.window, "dedupe-window", time.Duration(d.DefaultWindowMs)*time.Millisecond, "default dedupe window (the same for herald dedupe, api and replay)")
	fs.StringVar(&p.typeWindows, "type-windows", "", "per-type dedupe windows, e.g. 'invoice.paid=24h,chat.message=30s'")
	fs.DurationVar(&p.ttl, "idempotency-ttl", time.Duration(d.IdempotencyTTLMs)*time.Millisecond, "idempotency key TTL")
	fs.DurationVar(&p.skew, "clock-skew-allowance", time.Duration(d.SkewAllowanceMs)*time.Millisecond,
		"how far ahead a request may be stamped without expiring other keys early; at least herald.requests' message.timestamp.after.max.ms")
	addCheck(fs, func() error { _, err := p.policy(); return err })
}

// policy returns the dedupe policy; its error names every bad flag.
func (p *policyFlags) policy() (dedupe.Policy, error) {
	var errs []error
	if p.window <= 0 {
		errs = append(errs, badField("dedupe-window", "must be positive, got %v", p.window))
	}
	if p.ttl <= 0 {
		errs = append(errs, badField("idempotency-ttl", "must be positive, got %v", p.ttl))
	}
	if p.skew < 0 {
		errs = append(errs, badField("clock-skew-allowance", "must not be negative, got %v", p.skew))
	}
	tw, err := parseTypeWindows(p.typeWindows)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return dedupe.Policy{}, fmt.Errorf("%w: %w", errUsage, errors.Join(errs...))
	}
	return dedupe.Policy{DefaultWindowMs: p.window.Milliseconds(), TypeWindowMs: tw, IdempotencyTTLMs: p.ttl.Milliseconds(),
		SkewAllowanceMs: p.skew.Milliseconds()}, nil
}

// parseTypeWindows parses --type-windows; its error names every bad type.
func parseTypeWindows(s string) (map[string]int64, error) {
	out := map[string]int64{}
	var errs []error
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		typ, dur, ok := strings.Cut(kv, "=")
		if !ok || typ == "" {
			errs = append(errs, badField("type-windows", "%q is not type=duration", kv))
			continue
		}
		d, err := time.ParseDuration(dur)
		if err != nil {
			ms, err2 := strconv.ParseInt(dur, 10, 64)
			if err2 != nil || ms <= 0 {
				errs = append(errs, badField("type-windows", "%s: %v", typ, err))
				continue
			}
			d = time.Duration(ms) * time.Millisecond
		}
		if d <= 0 {
			errs = append(errs, badField("type-windows", "%s: window must be positive", typ))
			continue
		}
		out[typ] = d.Milliseconds()
	}
	return out, errors.Join(errs...)
}
