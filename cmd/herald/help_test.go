package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
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
			if paths[0] != c.name { // a command with verbs: its own -h lists them
				var out, errb bytes.Buffer
				if code := run(t.Context(), []string{c.name, "-h"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "Example:") {
					t.Fatalf("herald %s -h exits %d: %s", c.name, code, errb.String())
				}
			}
			for _, p := range paths {
				fs := freshFlagSet(p)
				if fs == nil {
					t.Fatalf("herald %s -h makes no flag set named %q", p, p)
				}
				var help bytes.Buffer
				fs.SetOutput(&help)
				fs.Usage()
				first, _, _ := strings.Cut(examples[p], "\n")
				if !strings.Contains(help.String(), "Example:\n  "+first) {
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

// TestEveryFlagSetHasAnExample finds every newFlagSet("name") in the
// command's source: each name (a command or a command and its verb) has an
// example, so its -h shows one and a configuration file may name its flags.
func TestEveryFlagSetHasAnExample(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`newFlagSet\("([^"]+)"\)`)
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			found++
			if examples[m[1]] == "" {
				t.Errorf("%s: herald %s has no example: add one to examples in help.go", f, m[1])
			}
		}
	}
	if found < 10 {
		t.Fatalf("found only %d newFlagSet calls: the pattern no longer matches the source", found)
	}
}
