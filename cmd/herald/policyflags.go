package main

import (
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
}

func (p *policyFlags) policy() (dedupe.Policy, error) {
	if p.window <= 0 {
		return dedupe.Policy{}, fmt.Errorf("%w: --dedupe-window must be positive, got %v", errUsage, p.window)
	}
	if p.ttl <= 0 {
		return dedupe.Policy{}, fmt.Errorf("%w: --idempotency-ttl must be positive, got %v", errUsage, p.ttl)
	}
	if p.skew < 0 {
		return dedupe.Policy{}, fmt.Errorf("%w: --clock-skew-allowance must not be negative, got %v", errUsage, p.skew)
	}
	tw, err := parseTypeWindows(p.typeWindows)
	if err != nil {
		return dedupe.Policy{}, err
	}
	return dedupe.Policy{DefaultWindowMs: p.window.Milliseconds(), TypeWindowMs: tw, IdempotencyTTLMs: p.ttl.Milliseconds(),
		SkewAllowanceMs: p.skew.Milliseconds()}, nil
}

func parseTypeWindows(s string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		typ, dur, ok := strings.Cut(kv, "=")
		if !ok || typ == "" {
			return nil, fmt.Errorf("%w: --type-windows: %q is not type=duration", errUsage, kv)
		}
		d, err := time.ParseDuration(dur)
		if err != nil {
			ms, err2 := strconv.ParseInt(dur, 10, 64)
			if err2 != nil || ms <= 0 {
				return nil, fmt.Errorf("%w: --type-windows: %s: %v", errUsage, typ, err)
			}
			d = time.Duration(ms) * time.Millisecond
		}
		if d <= 0 {
			return nil, fmt.Errorf("%w: --type-windows: %s: window must be positive", errUsage, typ)
		}
		out[typ] = d.Milliseconds()
	}
	return out, nil
}
