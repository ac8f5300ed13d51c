package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/processors/route"
)

// routeFlags are the route policy flags. herald route decides with them;
// herald dev, api (explain) and replay must be given the same values.
type routeFlags struct {
	rates, digests, urgent, fallback, quietEmail string
	chains                                       string
}

func (r *routeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.rates, "rate-limits", "", "rate limits per type or tenant/type, fixed windows, e.g. 'chat.message=5/1h,acme/promo=1/24h'")
	fs.StringVar(&r.digests, "digests", "", "digest windows per type, optionally with a digest key, e.g. 'comment.added=15m,like=1h:social'")
	fs.StringVar(&r.urgent, "urgent-types", "", "types that go through quiet hours, comma separated")
	fs.StringVar(&r.quietEmail, "quiet-email-types", "", "types whose email waits out the recipient's quiet hours like their pushes, comma separated (other types' email is never deferred)")
	fs.StringVar(&r.fallback, "fallback-channels", "", "channel per type when no device is reachable, e.g. 'invoice.paid=feed' (feed is the only deviceless channel)")
	fs.StringVar(&r.chains, "fallback-chains", "", "fallback chains per type, e.g. 'invoice.paid=push > email if failed,chat.message=push > email after 15m unless displayed|opened > feed' (herald fallback sends the later steps; "+route.ChainSyntax+")")
	addCheck(fs, func() error { _, err := r.policy(); return err })
}

// policy returns the route policy; its error names every bad flag and
// entry.
func (r *routeFlags) policy() (route.Policy, error) {
	p := route.Policy{Rates: map[string]route.RateLimit{}, Digests: map[string]route.Digest{}, Urgent: map[string]bool{}, Fallback: map[string]string{}, QuietEmail: map[string]bool{},
		Chains: map[string]route.Chain{}}
	errs := eachPair("rate-limits", r.rates, func(typ, v string) error {
		n, w, ok := strings.Cut(v, "/")
		max, err := strconv.Atoi(n)
		if !ok || err != nil || max < 1 {
			return fmt.Errorf("%q is not max/window", v)
		}
		d, err := time.ParseDuration(w)
		if err != nil || d < time.Millisecond {
			return fmt.Errorf("%q: the window is not a positive duration", v)
		}
		p.Rates[typ] = route.RateLimit{Max: max, WindowMs: d.Milliseconds()}
		return nil
	})
	errs = append(errs, eachPair("digests", r.digests, func(typ, v string) error {
		w, key, _ := strings.Cut(v, ":")
		d, err := time.ParseDuration(w)
		if err != nil || d < time.Millisecond {
			return fmt.Errorf("%q: the window is not a positive duration", v)
		}
		p.Digests[typ] = route.Digest{WindowMs: d.Milliseconds(), Key: key}
		return nil
	})...)
	errs = append(errs, eachPair("fallback-channels", r.fallback, func(typ, ch string) error {
		if ch != route.FeedChannel {
			return fmt.Errorf("%q: only %q needs no device", ch, route.FeedChannel)
		}
		p.Fallback[typ] = ch
		return nil
	})...)
	errs = append(errs, eachPair("fallback-chains", r.chains, func(typ, v string) error {
		c, err := route.ParseChain(v)
		if err != nil {
			return err
		}
		if _, both := p.Fallback[typ]; both {
			return fmt.Errorf("also has --fallback-channels; a chain replaces it: name the feed as a step")
		}
		p.Chains[typ] = c
		return nil
	})...)
	for _, typ := range strings.Split(r.urgent, ",") {
		if typ = strings.TrimSpace(typ); typ != "" {
			p.Urgent[typ] = true
		}
	}
	for _, typ := range strings.Split(r.quietEmail, ",") {
		if typ = strings.TrimSpace(typ); typ != "" {
			p.QuietEmail[typ] = true
		}
	}
	if len(errs) > 0 {
		return p, fmt.Errorf("%w: %w", errUsage, errors.Join(errs...))
	}
	return p, nil
}

// maxWindow is the longest rate or digest window: route state lives at
// most that long, or a night (deferred deliveries).
func routeMaxWindow(p route.Policy) time.Duration {
	m := int64(24 * 3600_000)
	for _, l := range p.Rates {
		m = max(m, l.WindowMs)
	}
	for _, d := range p.Digests {
		m = max(m, d.WindowMs)
	}
	return time.Duration(m) * time.Millisecond
}

// eachPair calls f for every "name=value" of the comma-separated flag
// named flagName, and returns an error naming the flag and the entry for
// every pair that is not name=value or that f refuses.
func eachPair(flagName, s string, f func(name, value string) error) []error {
	var errs []error
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		name, v, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			errs = append(errs, badField(flagName, "%q is not name=value", kv))
			continue
		}
		if err := f(name, v); err != nil {
			errs = append(errs, badField(flagName, "%s: %v", name, err))
		}
	}
	return errs
}

// chainedTypes are the types with a fallback chain.
func chainedTypes(chains map[string]route.Chain) map[string]bool {
	out := map[string]bool{}
	for typ := range chains {
		out[typ] = true
	}
	return out
}
