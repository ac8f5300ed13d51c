package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/chdb"
	"github.com/heraldhq/herald/internal/testenv"
)

// docBlock is one ```sh block of a Markdown file: shell commands a reader
// runs against herald dev.
type docBlock struct {
	file string
	line int // of the opening fence
	text string
}

// shBlocks returns the ```sh blocks of the Markdown files. Other blocks
// (``` alone, ```yaml, …) are shown, not run: the docs fence commands that
// must not run against herald dev (scripts/test, production addresses)
// without "sh".
func shBlocks(t *testing.T, files []string) []docBlock {
	t.Helper()
	var out []docBlock
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cur *docBlock
		for i, l := range strings.Split(string(raw), "\n") {
			switch {
			case cur == nil && strings.TrimSpace(l) == "```sh":
				cur = &docBlock{file: f, line: i + 1}
			case cur != nil && strings.TrimSpace(l) == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.text += l + "\n"
			}
		}
		if cur != nil {
			t.Fatalf("%s:%d: a ```sh block is not closed", f, cur.line)
		}
	}
	return out
}

func TestShBlocksAreTheFencedShellCommandsOnly(t *testing.T) {
	f := filepath.Join(t.TempDir(), "a.md")
	doc := "text\n```sh\ncurl -s localhost:8080/livez\necho two\n```\n```\nscripts/test\n```\n```yaml\nbrokers: [x]\n```\n"
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	got := shBlocks(t, []string{f})
	if len(got) != 1 || got[0].line != 2 || got[0].text != "curl -s localhost:8080/livez\necho two\n" {
		t.Fatalf("blocks %+v, want the one ```sh block at line 2", got)
	}
}

// docFiles are the Markdown files whose ```sh blocks the docs check runs.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, files...)
}

// TestEveryShellCommandInTheDocsRunsAgainstHeraldDev runs every ```sh
// block of README.md and docs/*.md, in order, against a herald dev of its
// own (free ports instead of herald dev's defaults, which the blocks name,
// and the test's binary for .cache/bin/herald), so the docs cannot rot: a
// command that fails, or a curl answered 4xx or 5xx, fails the test.
func TestEveryShellCommandInTheDocsRunsAgainstHeraldDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts herald dev with the chDB server; runs in the full suite")
	}
	if _, err := chdb.FindLib(); err != nil {
		t.Fatalf("chDB engine missing (scripts/install installs it): %v", err)
	}
	blocks := shBlocks(t, docFiles(t))
	if len(blocks) < 4 {
		t.Fatalf("%d ```sh blocks in the docs; the README's five minutes alone have 4", len(blocks))
	}
	bin := testenv.Herald(t)
	kafkaPort, httpPort, chTCP, chHTTP := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	dev := startDev(t, bin, t.TempDir(), kafkaPort, httpPort, chTCP, chHTTP)
	ports := strings.NewReplacer(":8080", fmt.Sprintf(":%d", httpPort), ":19000", fmt.Sprintf(":%d", chTCP),
		":18123", fmt.Sprintf(":%d", chHTTP), ":19092", fmt.Sprintf(":%d", kafkaPort))
	port := regexp.MustCompile(`:(8080|19000|18123|19092)\b`)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// curl answered 4xx or 5xx is a failure; -s stays quiet otherwise.
	const prelude = "set -euo pipefail\ncurl() { command curl --fail-with-body --max-time 30 \"$@\"; }\n"
	for _, b := range blocks {
		name := fmt.Sprintf("%s:%d", strings.TrimPrefix(b.file, "../../"), b.line)
		t.Run(name+" runs", func(t *testing.T) {
			script := port.ReplaceAllStringFunc(b.text, ports.Replace)
			script = strings.ReplaceAll(script, ".cache/bin/herald", bin)
			// A guard, not a timed assertion: what a block reads (the audit
			// in ClickHouse, a delivery's outcome) may land a moment after
			// the block before it wrote; every block is safe to run again
			// (idempotency keys, PUTs, reads).
			var out []byte
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
				cmd := exec.Command("bash", "-c", prelude+script)
				cmd.Dir = root
				cmd.Env = append(os.Environ(), "COLUMNS=100")
				if out, err = cmd.CombinedOutput(); err == nil {
					return
				}
				if time.Now().After(deadline) {
					log, _ := os.ReadFile(dev.log)
					t.Fatalf("%v\n--- script\n%s--- output\n%s\n--- herald dev's log (last 40 lines)\n%s", err, script, out, tail(string(log), 40))
				}
			}
		})
	}
}
