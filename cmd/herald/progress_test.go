package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestProgressDrawsOnATerminalAndLogsLinesElsewhere: on a terminal the bar
// (schollz/progressbar) is drawn with its count and ends its line; in logs
// nothing is drawn, short work logs nothing, and long work logs a plain
// line at most every progressLogEvery, then its last count.
func TestProgressDrawsOnATerminalAndLogsLinesElsewhere(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		tty  bool
		// at is the clock of each update of 50 of 100 records; the last
		// update is 100 of 100.
		at        []time.Duration
		wantOut   []string // in what the bar writes
		wantLines int      // progress lines logged
	}{
		{"on a terminal the bar is drawn with its count and ends its line", true, []time.Duration{0, time.Second}, []string{"replay", "100/100", "\n"}, 0},
		{"in logs short work writes and logs nothing", false, []time.Duration{0, time.Second, 9 * time.Second}, nil, 0},
		{"in logs long work logs a line every 10 s and its last count", false,
			[]time.Duration{0, 11 * time.Second, 12 * time.Second, 25 * time.Second}, nil, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, logs bytes.Buffer
			now := start
			p := newProgressTo(&out, tc.tty, slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return now }, "replay", "records")
			for i, d := range tc.at {
				now = start.Add(d)
				done := int64(50)
				if i == len(tc.at)-1 {
					done = 100
				}
				p.Update(done, 100)
			}
			p.Finish()
			if !tc.tty && out.Len() != 0 {
				t.Fatalf("drew %q outside a terminal", out.String())
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Fatalf("bar output %q lacks %q", out.String(), w)
				}
			}
			if got := strings.Count(logs.String(), "msg=progress"); got != tc.wantLines {
				t.Fatalf("%d progress lines logged, want %d:\n%s", got, tc.wantLines, logs.String())
			}
			if tc.wantLines > 0 && !strings.Contains(logs.String(), "done=100 total=100") {
				t.Fatalf("the last count is not logged:\n%s", logs.String())
			}
		})
	}
}
