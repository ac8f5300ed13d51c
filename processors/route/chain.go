package route

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/schemas"
)

// Step is one step of a fallback chain: its channels and the condition
// under which it fires, once the step before it has fired. A step with no
// condition fires with the step before it. The first step's condition is
// empty: it is the route stage's own fan-out.
type Step struct {
	Channels []string
	// AfterMs: wait this long after the step before fired (skipped when
	// that step made no delivery: nothing can be shown or opened).
	AfterMs int64
	// Unless: receipt kinds (displayed, opened) of any delivery of the
	// notification that cancel the step, and every step after it.
	Unless []string
	// IfFailed: fire only once every delivery of the step before has
	// ended without being delivered (device retired, failed,
	// dead-lettered, expired); one delivered cancels the step.
	IfFailed bool
}

// Chain is a type's fallback chain: an ordered list of steps, each
// channel in at most one step, so a delivery (notification, device)
// belongs to one step and its delivery id is distinct per step.
type Chain []Step

// ChainSyntax describes what ParseChain reads, for flag help and errors.
const ChainSyntax = "steps separated by '>', each 'channels [after DURATION] [unless displayed|opened] [if failed]'; channels: push (apns+fcm+webpush), apns, fcm, webpush, email, feed, joined by '+'"

// ParseChain reads a chain such as
// "push > email after 15m unless displayed|opened > feed" or
// "push > email if failed". '→' separates steps as '>' does, and "or"
// may join receipt kinds as '|' does.
func ParseChain(s string) (Chain, error) {
	s = strings.ReplaceAll(s, "→", ">")
	parts := strings.Split(s, ">")
	if len(parts) < 2 {
		return nil, fmt.Errorf("%q has one step; a chain needs at least two (%s)", strings.TrimSpace(s), ChainSyntax)
	}
	var c Chain
	seen := map[string]bool{}
	for i, part := range parts {
		st, err := parseStep(strings.Fields(part))
		if err != nil {
			return nil, fmt.Errorf("step %d %q: %w", i+1, strings.TrimSpace(part), err)
		}
		if i == 0 && (st.AfterMs > 0 || len(st.Unless) > 0 || st.IfFailed) {
			return nil, fmt.Errorf("step 1 %q: the first step is the route stage's fan-out and takes no condition", strings.TrimSpace(part))
		}
		for _, ch := range st.Channels {
			if seen[ch] {
				return nil, fmt.Errorf("step %d: channel %s is already in an earlier step", i+1, ch)
			}
			seen[ch] = true
		}
		c = append(c, st)
	}
	return c, nil
}

func parseStep(f []string) (Step, error) {
	var st Step
	if len(f) == 0 {
		return st, errors.New("empty step")
	}
	for _, name := range strings.Split(f[0], "+") {
		if name == "push" {
			st.Channels = append(st.Channels, pushChannels...)
		} else if slices.Contains(AllChannels, name) {
			st.Channels = append(st.Channels, name)
		} else {
			return st, fmt.Errorf("unknown channel %q (%s)", name, ChainSyntax)
		}
	}
	for i := 1; i < len(f); i++ {
		switch f[i] {
		case "after":
			if i+1 >= len(f) {
				return st, errors.New("after needs a duration")
			}
			d, err := time.ParseDuration(f[i+1])
			if err != nil || d <= 0 {
				return st, fmt.Errorf("after %q: not a positive duration", f[i+1])
			}
			st.AfterMs, i = d.Milliseconds(), i+1
		case "unless":
			for i+1 < len(f) && f[i+1] != "after" && f[i+1] != "if" {
				i++
				for _, k := range strings.Split(f[i], "|") {
					if k == "" || k == "or" {
						continue
					}
					if k != schemas.ReceiptDisplayed && k != schemas.ReceiptOpened {
						return st, fmt.Errorf("unless %q: a receipt is displayed or opened", k)
					}
					if !slices.Contains(st.Unless, k) {
						st.Unless = append(st.Unless, k)
					}
				}
			}
			if len(st.Unless) == 0 {
				return st, errors.New("unless needs displayed or opened")
			}
		case "if":
			if i+1 >= len(f) || f[i+1] != "failed" {
				return st, errors.New(`"if" must be followed by "failed"`)
			}
			st.IfFailed, i = true, i+1
		default:
			return st, fmt.Errorf("unexpected %q (%s)", f[i], ChainSyntax)
		}
	}
	return st, nil
}

// String is the chain as ParseChain reads it back.
func (c Chain) String() string {
	steps := make([]string, len(c))
	for i, st := range c {
		steps[i] = st.String()
	}
	return strings.Join(steps, " > ")
}

// String is the step as ParseChain reads it.
func (st Step) String() string {
	var b strings.Builder
	b.WriteString(channelsText(st.Channels))
	if st.AfterMs > 0 {
		b.WriteString(" after " + (time.Duration(st.AfterMs) * time.Millisecond).String())
	}
	if len(st.Unless) > 0 {
		b.WriteString(" unless " + strings.Join(st.Unless, "|"))
	}
	if st.IfFailed {
		b.WriteString(" if failed")
	}
	return b.String()
}

// channelsText writes the push channels, all three in their order, as push.
func channelsText(chs []string) string {
	if i := slices.Index(chs, pushChannels[0]); i >= 0 && len(chs) >= i+3 && slices.Equal(chs[i:i+3], pushChannels) {
		rest := append(append([]string{}, chs[:i]...), "push")
		return strings.Join(append(rest, chs[i+3:]...), "+")
	}
	return strings.Join(chs, "+")
}

// Has reports whether ch is in one of the steps.
func (c Chain) Has(ch string) bool {
	for _, st := range c {
		if slices.Contains(st.Channels, ch) {
			return true
		}
	}
	return false
}

// FallbackChainPrefix starts the part of a route decision's Detail that
// names the type's chain: the chain's text follows (ChainOf reads it).
const FallbackChainPrefix = "fallback chain: "

// ChainOf reads the chain a route decision's Detail names, if any.
func ChainOf(detail string) (Chain, bool) {
	_, text, ok := strings.Cut(detail, FallbackChainPrefix)
	if !ok {
		return nil, false
	}
	c, err := ParseChain(text)
	return c, err == nil
}
