package replay

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// ProgressBar draws a one-line progress bar on a terminal (usually stderr),
// redrawn at most every 200 ms and only once the run has lasted half a
// second, so short runs print nothing.
type ProgressBar struct {
	w     io.Writer
	label string
	start time.Time
	now   func() time.Time

	mu    sync.Mutex
	last  time.Time
	drawn bool
}

// NewProgressBar returns a bar writing to w.
func NewProgressBar(w io.Writer, label string) *ProgressBar {
	return &ProgressBar{w: w, label: label, start: time.Now(), now: time.Now}
}

// Update records progress; it fits Options.Progress.
func (b *ProgressBar) Update(done, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if now.Sub(b.start) < 500*time.Millisecond || now.Sub(b.last) < 200*time.Millisecond {
		return
	}
	b.last = now
	b.drawn = true
	fmt.Fprint(b.w, "\r"+b.line(done, total, now)+"\x1b[K")
}

// Finish ends the bar's line, if one was drawn.
func (b *ProgressBar) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}

func (b *ProgressBar) line(done, total int64, now time.Time) string {
	const width = 30
	frac := 1.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	fill := int(frac * width)
	el := now.Sub(b.start).Seconds()
	rate := float64(done) / max(el, 1e-3)
	eta := "-"
	if rate > 0 && total > done {
		eta = time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	return fmt.Sprintf("%s [%s%s] %3.0f%% %d/%d records, %.0f/s, eta %s",
		b.label, strings.Repeat("#", fill), strings.Repeat(".", width-fill), 100*frac, done, total, rate, eta)
}
