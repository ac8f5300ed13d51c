package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Row is one measurement: one backend deciding the whole stream one way.
type Row struct {
	// Backend is "herald/kafka", "postgres" or "redis".
	Backend string
	// Variant says how: the transaction size, one statement per round trip,
	// a batch or pipeline size.
	Variant string
	// Records is the number of requests handled in Elapsed.
	Records int
	// Accepted is how many requests the backend accepted as new
	// notifications; -1 when the row decides nothing (producing the stream).
	Accepted int
	// Decisions is how many decisions the backend answered with: herald's
	// decision records committed on the decisions topic, one per reply
	// for PostgreSQL and Redis; -1 when the row decides nothing.
	Decisions int
	// Elapsed is the timed part, from the first request sent (herald: from
	// the stage owning all its partitions) to the last decision durable
	// (herald: every input offset committed).
	Elapsed time.Duration
	// CPU is the CPU time this process spent in Elapsed (herald's stage, or
	// the PostgreSQL and Redis clients), ServerCPU the backend server's
	// when it runs on this machine (see cpu.go); 0 when not measured.
	CPU, ServerCPU time.Duration
	// Note holds what else the reader needs: transactions, setup times.
	Note string
}

// Decides reports whether the row decides requests (and so takes part in
// the accepted-count check).
func (r Row) Decides() bool { return r.Accepted >= 0 }

// PerSecond is n per second of Elapsed.
func (r Row) PerSecond(n int) float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(n) / r.Elapsed.Seconds()
}

var columns = []struct {
	name  string
	right bool
}{
	{"backend", false}, {"variant", false}, {"records", true}, {"accepted", true},
	{"seconds", true}, {"records/s", true}, {"decisions/s", true}, {"cpu µs/rec", true}, {"notes", false},
}

// cpuCell is the CPU time per record of this process, and of the server
// when it was measured: "9.1 + 6.3", "9.1" or "-".
func (r Row) cpuCell() string {
	if r.CPU <= 0 || r.Records <= 0 {
		return "-"
	}
	per := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d.Nanoseconds())/1e3/float64(r.Records), 'f', 1, 64)
	}
	if r.ServerCPU <= 0 {
		return per(r.CPU)
	}
	return per(r.CPU) + " + " + per(r.ServerCPU)
}

func (r Row) cells() []string {
	na := func(n int, s string) string {
		if n < 0 {
			return "-"
		}
		return s
	}
	return []string{
		r.Backend,
		r.Variant,
		strconv.Itoa(r.Records),
		na(r.Accepted, strconv.Itoa(r.Accepted)),
		strconv.FormatFloat(r.Elapsed.Seconds(), 'f', 2, 64),
		strconv.FormatFloat(r.PerSecond(r.Records), 'f', 0, 64),
		na(r.Decisions, strconv.FormatFloat(r.PerSecond(r.Decisions), 'f', 0, 64)),
		r.cpuCell(),
		r.Note,
	}
}

// WriteTable writes rows as a plain table: columns separated by two
// spaces, text left-aligned, numbers right-aligned, no trailing blanks.
func WriteTable(w io.Writer, rows []Row) error {
	table := [][]string{make([]string, len(columns))}
	for i, c := range columns {
		table[0][i] = c.name
	}
	for _, r := range rows {
		table = append(table, r.cells())
	}
	width := make([]int, len(columns))
	for _, line := range table {
		for i, cell := range line {
			width[i] = max(width[i], len([]rune(cell)))
		}
	}
	var b strings.Builder
	for _, line := range table {
		var l strings.Builder
		for i, cell := range line {
			if i > 0 {
				l.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-len([]rune(cell)))
			if columns[i].right {
				l.WriteString(pad + cell)
			} else {
				l.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	return nil
}

// WriteMarkdown writes rows as a GitHub Markdown table, numbers
// right-aligned, for pasting into BENCHMARKS.md.
func WriteMarkdown(w io.Writer, rows []Row) error {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
		}
		b.WriteByte('\n')
	}
	head, rule := make([]string, len(columns)), make([]string, len(columns))
	for i, c := range columns {
		head[i], rule[i] = c.name, "---"
		if c.right {
			rule[i] = "---:"
		}
	}
	line(head)
	line(rule)
	for _, r := range rows {
		line(r.cells())
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("bench: write markdown: %w", err)
	}
	return nil
}

// LoadAverage returns the host's one-minute load average as /proc/loadavg
// writes it, or "" where that file is missing.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}

// Host describes the machine and how busy it was around the run, e.g.
// "2 CPUs, load average 1.02 before, 2.31 after". The backends run one
// after another, so a busy host skews them unevenly: print it with the table.
func (r Report) Host() string {
	h := fmt.Sprintf("%d CPUs", runtime.NumCPU())
	if r.LoadBefore != "" {
		h += fmt.Sprintf(", load average %s before, %s after", r.LoadBefore, r.LoadAfter)
	}
	return h
}
