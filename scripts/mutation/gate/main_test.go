package main

import (
	"strings"
	"testing"
)

func TestGateCounting(t *testing.T) {
	rep := report{Files: []fileReport{{FileName: "decide.go"}}}
	add := func(status string, line int) {
		rep.Files[0].Mutations = append(rep.Files[0].Mutations, mutation{"CONDITIONALS_BOUNDARY", status, line, 1})
	}
	add("KILLED", 1)
	add("TIMED OUT", 2)
	add("LIVED", 3)
	add("LIVED", 4)
	add("NOT COVERED", 5)
	add("NOT VIABLE", 6)

	eq, err := readEquivalents(strings.NewReader("# comment\nprocessors/dedupe/decide.go:4:1 CONDITIONALS_BOUNDARY both branches return the same value\n"))
	if err != nil {
		t.Fatal(err)
	}
	used := map[mutant]bool{}
	got := count("processors/dedupe", rep, eq, used)

	t.Run("killed and timed-out mutants count as detected, not-viable ones not at all", func(t *testing.T) {
		if got.detected != 2 {
			t.Fatalf("detected = %d, want 2", got.detected)
		}
		if got.timedOut != 1 {
			t.Fatalf("timed out = %d, want 1 (printed apart from the kills)", got.timedOut)
		}
	})
	t.Run("a listed equivalent mutant leaves both ratios and is reported with its reason", func(t *testing.T) {
		if got.lived != 1 || len(got.equivalent) != 1 || !strings.Contains(got.equivalent[0], "same value") {
			t.Fatalf("lived = %d, equivalent = %v", got.lived, got.equivalent)
		}
		if !used[mutant{"processors/dedupe/decide.go:4:1", "CONDITIONALS_BOUNDARY"}] {
			t.Fatal("the equivalent was not marked used")
		}
	})
	t.Run("efficacy is detected over detected plus lived, coverage leaves out the uncovered", func(t *testing.T) {
		if e := got.efficacy(); e < 66.6 || e > 66.7 {
			t.Fatalf("efficacy = %.2f, want 66.67", e)
		}
		if c := got.coverage(); c != 75 {
			t.Fatalf("coverage = %.2f, want 75", c)
		}
	})
	t.Run("an equivalent without a reason is refused", func(t *testing.T) {
		if _, err := readEquivalents(strings.NewReader("a.go:1:1 CONDITIONALS_BOUNDARY\n")); err == nil {
			t.Fatal("no error")
		}
	})
}
