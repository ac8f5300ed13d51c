package replay

import (
	"strings"
	"testing"
	"time"
)

func TestTheProgressBarDrawsOnlyOnLongRuns(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		after   []time.Duration // clock at each update
		drawn   int             // lines drawn
		contain string
	}{
		{"a run shorter than half a second draws nothing", []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond}, 0, ""},
		{"a long run draws, at most every 200 ms", []time.Duration{600 * time.Millisecond, 700 * time.Millisecond, 900 * time.Millisecond}, 2, "50%"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			b := NewProgressBar(&out, "replay")
			b.start = start
			for _, d := range c.after {
				b.now = func() time.Time { return start.Add(d) }
				b.Update(50, 100)
			}
			b.Finish()
			if got := strings.Count(out.String(), "\r"); got != c.drawn {
				t.Fatalf("drew %d times, want %d: %q", got, c.drawn, out.String())
			}
			if c.drawn > 0 && (!strings.Contains(out.String(), c.contain) || !strings.HasSuffix(out.String(), "\n")) {
				t.Fatalf("output %q lacks %q or the final newline", out.String(), c.contain)
			}
			if c.drawn == 0 && out.Len() != 0 {
				t.Fatalf("short run wrote %q", out.String())
			}
		})
	}
}
