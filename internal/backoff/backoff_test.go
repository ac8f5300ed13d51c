package backoff

import (
	"testing"
	"time"
)

func TestDelaysAreJitteredBoundedAndHonourAFloor(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: time.Second}
	cases := []struct {
		name   string
		n      int
		floor  time.Duration
		lo, hi time.Duration
	}{
		{"the first retry waits up to twice the minimum", 1, 0, 0, 200 * time.Millisecond},
		{"later retries wait up to the maximum", 10, 0, 0, time.Second},
		{"a huge retry number does not overflow", 80, 0, 0, time.Second},
		{"a negative retry number waits up to the minimum", -3, 0, 0, 100 * time.Millisecond},
		{"a floor (Retry-After) is honoured", 1, 3 * time.Second, 3 * time.Second, 3 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var above time.Duration // the jitter spreads: some delay lands in the upper half
			for i := 0; i < 500; i++ {
				d := p.Delay(tc.n, tc.floor)
				if d < tc.lo || d > tc.hi {
					t.Fatalf("delay %v outside [%v, %v]", d, tc.lo, tc.hi)
				}
				above = max(above, d)
			}
			if tc.floor == 0 && above <= tc.hi/2 {
				t.Fatalf("500 delays all at or below %v: not jittered over [0, %v]", tc.hi/2, tc.hi)
			}
		})
	}
}

func TestZeroPolicyTakesTheDefaults(t *testing.T) {
	var p Policy
	if got := p.Ceiling(1); got != 2*Default.Min {
		t.Fatalf("ceiling of retry 1 = %v, want %v", got, 2*Default.Min)
	}
	if got := p.Ceiling(100); got != Default.Max {
		t.Fatalf("ceiling of retry 100 = %v, want %v", got, Default.Max)
	}
}
