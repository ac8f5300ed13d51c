// Package backoff owns herald's one retry-delay policy: bounded exponential
// backoff with full jitter. Retry n (1-based) waits a uniformly random time
// in [0, min(Max, Min·2ⁿ)], so retries of many callers that failed together
// spread out instead of arriving in waves, and no wait exceeds Max.
//
// Every retry loop in herald (the SDK's HTTP calls, the stage runtime's
// produce retries, the sinks' provider calls) takes its delays from here.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy bounds the delays. Zero fields take the defaults: Min 200 ms,
// Max 10 s.
type Policy struct {
	Min, Max time.Duration
}

// Default is the policy with the defaults.
var Default = Policy{Min: 200 * time.Millisecond, Max: 10 * time.Second}

func (p Policy) bounds() (lo, hi time.Duration) {
	lo, hi = p.Min, p.Max
	if lo <= 0 {
		lo = Default.Min
	}
	if hi <= 0 {
		hi = Default.Max
	}
	return lo, max(lo, hi)
}

// Ceiling is the longest wait before retry n: min(Max, Min·2ⁿ).
func (p Policy) Ceiling(n int) time.Duration {
	lo, hi := p.bounds()
	if n < 0 {
		n = 0
	}
	if n < 62 && lo<<n > 0 && lo<<n < hi {
		return lo << n
	}
	return hi
}

// Delay is the wait before retry n: uniform in [0, Ceiling(n)], but never
// less than floor (a server's Retry-After; 0 for none).
func (p Policy) Delay(n int, floor time.Duration) time.Duration {
	d := time.Duration(rand.Int64N(int64(p.Ceiling(n)) + 1))
	return max(d, floor)
}

// Sleep waits d, or until ctx is done (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
