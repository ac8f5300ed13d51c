package main

import (
	"bytes"
	"context"
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
				if p != c.name && verbSummaries[p] == "" {
					t.Fatalf("herald %s has no summary of its own: add one to verbSummaries in help.go", p)
				}
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

// TestHelpOfACommandThatAlsoHasAVerb: herald bench runs on its own and has
// a verb (bench api). Its -h shows its own flags and points at the verb's
// help; the verb's -h shows the verb's flags.
func TestHelpOfACommandThatAlsoHasAVerb(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
		not  string
	}{
		{"herald bench -h shows bench's flags and names bench api", []string{"bench", "-h"},
			[]string{"usage: herald bench [flags]", "-stream-step", "Run 'herald bench api -h'"}, "usage: herald bench api"},
		{"herald bench api -h shows the verb's flags", []string{"bench", "api", "-h"},
			[]string{"usage: herald bench api [flags]", "-clients"}, "-stream-step"},
		{"herald help topics create is herald topics create -h", []string{"help", "topics", "create"},
			[]string{"usage: herald topics create [flags]", "-partitions"}, "usage: herald <command>"},
		{"herald topics -h still lists its verbs", []string{"topics", "-h"},
			[]string{"usage: herald topics create|delete|verify [flags]", "Run 'herald topics <verb> -h'"}, "Flags ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			help := helpOf(t, tc.args)
			for _, w := range tc.want {
				if !strings.Contains(help, w) {
					t.Errorf("help lacks %q:\n%s", w, help)
				}
			}
			if strings.Contains(help, tc.not) {
				t.Errorf("help shows %q:\n%s", tc.not, help)
			}
		})
	}
}

// helpOf runs herald with args, which must exit 0, and returns what it
// wrote to stderr (see runCapturing).
func helpOf(t *testing.T, args []string) string {
	t.Helper()
	code, stderr := runCapturing(t, t.Context(), args)
	if code != 0 {
		t.Fatalf("herald %s exits %d: %s", strings.Join(args, " "), code, stderr)
	}
	return stderr
}

// runCapturing runs herald with args and returns its exit code and what it
// wrote to stderr: run's stderr, where errors and a command's verbs go, and
// the process's, where a flag set prints its help. Not for parallel tests.
func runCapturing(t *testing.T, ctx context.Context, args []string) (int, string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	saved := os.Stderr
	os.Stderr = f
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	os.Stderr = saved
	flags, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, errb.String() + string(flags)
}
