package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestEveryCommandsHelpHasAnExample walks every command of commands():
// each has an example (for each of its verbs, if it has verbs), its -h
// shows it, and every example's flags are flags the command accepts.
func TestEveryCommandsHelpHasAnExample(t *testing.T) {
	for _, c := range commands() {
		t.Run("herald "+c.name+" -h shows an example", func(t *testing.T) {
			var paths []string
			for _, p := range commandPaths() {
				if p == c.name || strings.HasPrefix(p, c.name+" ") {
					paths = append(paths, p)
				}
			}
			if len(paths) == 0 {
				t.Fatalf("no example for %q: add one to examples in help.go", c.name)
			}
			var out, errb bytes.Buffer
			if code := run(t.Context(), []string{c.name, "-h"}, &out, &errb); code != 0 {
				t.Fatalf("herald %s -h exits %d: %s", c.name, code, errb.String())
			}
			for _, p := range paths {
				fs := freshFlagSet(p)
				if fs == nil {
					t.Fatalf("herald %s -h makes no flag set named %q", p, p)
				}
				var help bytes.Buffer
				fs.SetOutput(&help)
				fs.Usage()
				if !strings.Contains(help.String(), "Example:\n  herald "+p) {
					t.Fatalf("herald %s -h shows no example:\n%s", p, help.String())
				}
				for _, line := range strings.Split(examples[p], "\n") {
					args := exampleArgs(line)
					if strings.Join(args[:min(len(args), len(strings.Fields(p)))], " ") != p {
						t.Fatalf("example %q does not run herald %s", line, p)
					}
					if err := freshFlagSet(p).Parse(args[len(strings.Fields(p)):]); err != nil {
						t.Fatalf("example %q: its flags are refused: %v", line, err)
					}
				}
			}
		})
	}
}

// exampleArgs are the arguments after "herald" of an example line, without
// leading VAR=value assignments, quotes and a trailing comment.
func exampleArgs(line string) []string {
	line, _, _ = strings.Cut(line, "#")
	var args []string
	started := false
	for _, w := range strings.Fields(line) {
		switch {
		case !started && w == "herald":
			started = true
		case started:
			args = append(args, strings.Trim(w, `'"`))
		}
	}
	return args
}
