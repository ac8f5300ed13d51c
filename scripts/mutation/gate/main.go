// Command gate reads the JSON reports gremlins writes (one per package) and
// enforces herald's mutation-testing thresholds per package: test efficacy
// (detected ÷ detected+lived) and mutant coverage (detected+lived ÷ all
// viable mutants). It is run by scripts/mutation/mutation.
//
// Counting, and why:
//   - KILLED and TIMED OUT are detected. scripts/mutation runs gremlins with a
//     generous timeout coefficient, so a timeout is a mutant that made the
//     tests hang (an infinite loop), which CI would report too.
//   - NOT VIABLE (does not compile) and SKIPPED mutants are left out.
//   - A mutant listed in the equivalents file (an equivalent mutant: no test
//     can tell it from the original) is left out of both ratios and printed
//     with its reason, never silently.
//
// Usage: gate -equivalent FILE -efficacy 90 -mcover 85 pkg=report.json ...
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// report is the part of a gremlins JSON report the gate reads.
type report struct {
	Files []fileReport `json:"files"`
}

type fileReport struct {
	FileName  string     `json:"file_name"`
	Mutations []mutation `json:"mutations"`
}

type mutation struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// mutant names one mutation: "identity/key.go:41:63 CONDITIONALS_NEGATION".
type mutant struct {
	pos, kind string
}

func (m mutant) String() string { return m.pos + " " + m.kind }

// tally is one package's counts.
type tally struct {
	detected, lived, notCovered int
	timedOut                    int // of detected
	equivalent                  []string
	survivors                   []string
}

func (t tally) efficacy() float64 {
	if t.detected+t.lived == 0 {
		return 100
	}
	return 100 * float64(t.detected) / float64(t.detected+t.lived)
}

func (t tally) coverage() float64 {
	all := t.detected + t.lived + t.notCovered
	if all == 0 {
		return 100
	}
	return 100 * float64(t.detected+t.lived) / float64(all)
}

// readEquivalents parses lines "path/file.go:LINE:COL TYPE reason…"; blank
// lines and lines starting with # are skipped. A reason is required.
func readEquivalents(r io.Reader) (map[mutant]string, error) {
	eq := map[mutant]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("equivalents line %d: want \"path:line:col TYPE reason\", got %q", n, line)
		}
		eq[mutant{f[0], f[1]}] = strings.Join(f[2:], " ")
	}
	return eq, sc.Err()
}

// count tallies one package's report; used records which equivalents matched.
func count(pkg string, rep report, eq map[mutant]string, used map[mutant]bool) tally {
	var t tally
	for _, f := range rep.Files {
		for _, m := range f.Mutations {
			id := mutant{fmt.Sprintf("%s:%d:%d", path.Join(pkg, f.FileName), m.Line, m.Column), m.Type}
			if reason, ok := eq[id]; ok && (m.Status == "LIVED" || m.Status == "NOT COVERED") {
				used[id] = true
				t.equivalent = append(t.equivalent, fmt.Sprintf("%s (%s): %s", id, strings.ToLower(m.Status), reason))
				continue
			}
			switch m.Status {
			case "KILLED":
				t.detected++
			case "TIMED OUT":
				t.detected++
				t.timedOut++
			case "LIVED":
				t.lived++
				t.survivors = append(t.survivors, "lived       "+id.String())
			case "NOT COVERED":
				t.notCovered++
				t.survivors = append(t.survivors, "not covered "+id.String())
			}
		}
	}
	sort.Strings(t.survivors)
	return t
}

func main() {
	eqFile := flag.String("equivalent", "", "file listing equivalent mutants with their reasons")
	minEff := flag.Float64("efficacy", 90, "minimum test efficacy per package, percent")
	minCov := flag.Float64("mcover", 85, "minimum mutant coverage per package, percent")
	flag.Parse()

	eq := map[mutant]string{}
	if *eqFile != "" {
		f, err := os.Open(*eqFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutation gate:", err)
			os.Exit(2)
		}
		eq, err = readEquivalents(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutation gate:", err)
			os.Exit(2)
		}
	}
	used := map[mutant]bool{}
	failed := false
	for _, arg := range flag.Args() {
		pkg, file, ok := strings.Cut(arg, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "mutation gate: argument %q: want pkg=report.json\n", arg)
			os.Exit(2)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutation gate:", err)
			os.Exit(2)
		}
		var rep report
		if err := json.Unmarshal(b, &rep); err != nil {
			fmt.Fprintf(os.Stderr, "mutation gate: %s: %v\n", file, err)
			os.Exit(2)
		}
		t := count(pkg, rep, eq, used)
		verdict := "ok"
		if t.efficacy() < *minEff || t.coverage() < *minCov {
			verdict, failed = "FAIL", true
		}
		fmt.Printf("%-28s efficacy %5.1f%% (≥ %.0f)  coverage %5.1f%% (≥ %.0f)  detected %d (timed out %d) lived %d not-covered %d equivalent %d  %s\n",
			pkg, t.efficacy(), *minEff, t.coverage(), *minCov, t.detected, t.timedOut, t.lived, t.notCovered, len(t.equivalent), verdict)
		for _, s := range t.equivalent {
			fmt.Println("    equivalent  " + s)
		}
		if verdict == "FAIL" {
			for _, s := range t.survivors {
				fmt.Println("    " + s)
			}
		}
	}
	for id := range eq {
		if !used[id] {
			pkg := path.Dir(strings.SplitN(id.pos, ":", 2)[0])
			for _, arg := range flag.Args() {
				if strings.HasPrefix(arg, pkg+"=") {
					fmt.Printf("stale equivalent (no longer a surviving mutant): %s\n", id)
				}
			}
		}
	}
	if failed {
		fmt.Println("mutation gate: FAIL: a package is below its thresholds")
		os.Exit(1)
	}
	fmt.Println("mutation gate: ok")
}
