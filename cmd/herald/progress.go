package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows how far long work is (replay, migrate, bench): on a
// terminal a bar redrawn in place (github.com/schollz/progressbar), in logs
// and tests a plain log line at most every progressLogEvery, so nothing is
// redrawn where no one sees it and short work stays quiet.
type progress struct {
	label, unit string
	bar         *progressbar.ProgressBar // nil when not on a terminal
	log         *slog.Logger
	now         func() time.Time

	mu                sync.Mutex
	start, lastLogged time.Time
	logged            bool
	lastDone, lastMax int64
}

// progressLogEvery is how often progress is logged when stderr is no
// terminal.
const progressLogEvery = 10 * time.Second

// newProgress reports to stderr: a bar when stderr is a terminal (or force
// is set: --progress), log lines otherwise.
func newProgress(label, unit string, force bool) *progress {
	return newProgressTo(os.Stderr, force || stderrIsTerminal(), slog.Default(), time.Now, label, unit)
}

// newProgressTo reports label's progress in unit to w when tty, to log
// otherwise.
func newProgressTo(w io.Writer, tty bool, log *slog.Logger, now func() time.Time, label, unit string) *progress {
	p := &progress{label: label, unit: unit, log: log, now: now, start: now()}
	if tty {
		p.bar = progressbar.NewOptions64(-1,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(label),
			progressbar.OptionSetItsString(unit),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetRenderBlankState(false),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		)
	}
	return p
}

// Update records that done of total units are done (total may grow).
func (p *progress) Update(done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastDone, p.lastMax = done, total
	if p.bar != nil {
		if total > 0 && total != p.bar.GetMax64() {
			p.bar.ChangeMax64(total)
		}
		_ = p.bar.Set64(done)
		return
	}
	now := p.now()
	if now.Sub(p.start) < progressLogEvery || now.Sub(p.lastLogged) < progressLogEvery {
		return
	}
	p.lastLogged, p.logged = now, true
	p.log.Info("progress", "work", p.label, "done", done, "total", total, "unit", p.unit,
		"elapsed", now.Sub(p.start).Round(time.Second))
}

// Finish ends the bar's line, or logs the last count if progress was
// logged.
func (p *progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		if p.bar.State().CurrentNum > 0 {
			_ = p.bar.Finish()
		}
		return
	}
	if p.logged {
		p.log.Info("progress", "work", p.label, "done", p.lastDone, "total", p.lastMax, "unit", p.unit,
			"elapsed", p.now().Sub(p.start).Round(time.Second))
	}
}

// stderrIsTerminal reports whether stderr is a character device (a
// terminal), where a redrawn progress line is welcome.
func stderrIsTerminal() bool {
	fi, err := os.Stderr.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
