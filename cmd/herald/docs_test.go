package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/chdb"
	"github.com/heraldhq/herald/internal/testenv"
)

// docBlock is one fenced block of a Markdown file.
type docBlock struct {
	file string
	line int    // of the opening fence
	lang string // the fence's info string: "" for ``` alone
	text string
}

// shellLangs are the info strings of a block that shows shell commands:
// ``` alone included, since a reader takes a bare block of commands for
// commands. The docs check runs every such block. Any other info string
// (text, yaml, json, sql, …) shows text, not commands to run.
var shellLangs = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true}

// fencedBlocks returns every fenced block of the Markdown files.
func fencedBlocks(t *testing.T, files []string) []docBlock {
	t.Helper()
	var out []docBlock
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cur *docBlock
		for i, l := range strings.Split(string(raw), "\n") {
			trimmed := strings.TrimSpace(l)
			switch {
			case cur == nil && strings.HasPrefix(trimmed, "```"):
				cur = &docBlock{file: f, line: i + 1, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
			case cur != nil && trimmed == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.text += l + "\n"
			}
		}
		if cur != nil {
			t.Fatalf("%s:%d: a fenced block is not closed", f, cur.line)
		}
	}
	return out
}

// shellBlocks are the blocks of fencedBlocks that show shell commands.
func shellBlocks(t *testing.T, files []string) []docBlock {
	t.Helper()
	var out []docBlock
	for _, b := range fencedBlocks(t, files) {
		if shellLangs[b.lang] {
			out = append(out, b)
		}
	}
	return out
}

func TestShellBlocksAreEveryBlockThatShowsCommands(t *testing.T) {
	f := filepath.Join(t.TempDir(), "a.md")
	doc := "text\n```sh\ncurl -s localhost:8080/livez\necho two\n```\n```\nscripts/test\n```\n```bash\nls\n```\n" +
		"```yaml\nbrokers: [x]\n```\n```text\nclickhouse client\n```\n"
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range shellBlocks(t, []string{f}) {
		got = append(got, fmt.Sprintf("%d %q %q", b.line, b.lang, b.text))
	}
	want := []string{`2 "sh" "curl -s localhost:8080/livez\necho two\n"`, `6 "" "scripts/test\n"`, `9 "bash" "ls\n"`}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("blocks %v, want %v: ```sh, ``` alone and ```bash are run, ```yaml and ```text are not", got, want)
	}
}

// docFiles are the Markdown files whose shell blocks the docs check runs.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, files...)
}

// docRule rewrites the commands of a shell block into the ones the docs
// check runs, and says why. Every rule (the rules of one why together)
// must rewrite some block of the docs: a rule nothing needs is removed.
type docRule struct {
	why  string
	re   *regexp.Regexp
	repl string // for re.ReplaceAllString
}

// devAddrs are the addresses and files of the docs check's own herald dev.
type devAddrs struct {
	kafka, http, chTCP, chHTTP int
	bin                        string // the test's herald
	config                     string // a --config file naming the addresses above
	// scripts/dev's herald dev: ports and state of its own.
	scriptsDev string // its flags
	scriptsDir string // its state
}

// docRules are the rewrites of the docs check, in the order applied:
//
//   - herald dev's default ports (8080, 19092, 19000, 18123) are the
//     check's herald dev's, on free ports;
//   - the documented production placeholders kafka-1:9092 (Kafka) and
//     clickhouse:9000 (ClickHouse) are herald dev's too, and
//     /etc/herald/herald.yaml is a configuration file naming them;
//   - .cache/bin/herald is the test's herald build (so is herald: it is
//     first on PATH);
//   - scripts/dev (herald dev in the foreground until Ctrl-C) runs on free
//     ports and a state of its own, until it prints "herald dev is up",
//     then gets SIGINT (Ctrl-C) and must exit 0;
//   - scripts/test is what runs this check: bash parses it (bash -n);
//   - go test over ./... runs ./identity: the whole suite is scripts/test's;
//   - scripts/mutation/mutation (minutes to hours) is a dry run
//     (HERALD_MUTATION_DRY_RUN=1: gremlins runs, the gate builds, the
//     packages exist, the commands are printed);
//   - go run ./scripts/chaos (minutes, a 3-node cluster) parses its flags
//     and prints its help (-h after them).
func docRules(a devAddrs) []docRule {
	return []docRule{
		{"herald dev's default ports are the check's herald dev's",
			regexp.MustCompile(`:8080\b`), fmt.Sprintf(":%d", a.http)},
		{"herald dev's default ports are the check's herald dev's",
			regexp.MustCompile(`:19092\b`), fmt.Sprintf(":%d", a.kafka)},
		{"herald dev's default ports are the check's herald dev's",
			regexp.MustCompile(`:19000\b`), fmt.Sprintf(":%d", a.chTCP)},
		{"herald dev's default ports are the check's herald dev's",
			regexp.MustCompile(`:18123\b`), fmt.Sprintf(":%d", a.chHTTP)},
		{"the production placeholder kafka-1:9092 is herald dev's Kafka",
			regexp.MustCompile(`\bkafka-1:9092\b`), fmt.Sprintf("127.0.0.1:%d", a.kafka)},
		{"the production placeholder clickhouse:9000 is herald dev's ClickHouse",
			regexp.MustCompile(`\bclickhouse:9000\b`), fmt.Sprintf("127.0.0.1:%d", a.chTCP)},
		{"/etc/herald/herald.yaml names herald dev's addresses",
			regexp.MustCompile(`/etc/herald/herald\.yaml\b`), a.config},
		{".cache/bin/herald is the test's herald",
			regexp.MustCompile(`(?m)(^|[\s(])\.cache/bin/herald\b`), "${1}" + a.bin},
		{"scripts/dev starts on ports of its own and is interrupted once it is up",
			regexp.MustCompile(`(?m)^scripts/dev\b`), "HERALD_STATE_DIR=" + a.scriptsDir + " start_and_stop scripts/dev " + a.scriptsDev},
		{"scripts/test runs this check: bash parses it",
			regexp.MustCompile(`(?m)^scripts/test\b[^#\n]*`), "bash -n scripts/test "},
		{"go test over ./... runs ./identity: the whole suite is scripts/test's",
			regexp.MustCompile(`(?m)^(go test\b[^#\n]*?)\./\.\.\.`), "${1}./identity"},
		{"scripts/mutation/mutation is a dry run",
			regexp.MustCompile(`(?m)^scripts/mutation/mutation\b`), "HERALD_MUTATION_DRY_RUN=1 scripts/mutation/mutation"},
		{"go run ./scripts/chaos parses its flags and prints its help",
			regexp.MustCompile(`(?m)^(go run \./scripts/chaos\b[^#\n]*?)(\s*#.*)?$`), "${1} -h${2}"},
	}
}

// rewrite applies rules to a block's text, in order, and reports which
// rules (by why) rewrote something.
func rewrite(rules []docRule, text string, used map[string]bool) string {
	for _, r := range rules {
		if r.re.MatchString(text) {
			used[r.why] = true
			text = r.re.ReplaceAllString(text, r.repl)
		}
	}
	return text
}

func TestDocRulesRewriteWhatTheCheckCannotRunAsShown(t *testing.T) {
	a := devAddrs{kafka: 1001, http: 1002, chTCP: 1003, chHTTP: 1004, bin: "/b/herald", config: "/c/herald.yaml", scriptsDev: "--http-addr 127.0.0.1:1005", scriptsDir: "/s"}
	for _, c := range []struct{ name, shown, run string }{
		{"herald dev's ports are the check's", "curl -s localhost:8080/x http://127.0.0.1:18123/ --clickhouse-addr 127.0.0.1:19000 --brokers 127.0.0.1:19092",
			"curl -s localhost:1002/x http://127.0.0.1:1004/ --clickhouse-addr 127.0.0.1:1003 --brokers 127.0.0.1:1001"},
		{"a port that merely starts like one of herald dev's is left alone", "curl -s localhost:80801/", "curl -s localhost:80801/"},
		{"the production placeholders are herald dev's", "herald replay --brokers kafka-1:9092 --clickhouse-addr clickhouse:9000 --config /etc/herald/herald.yaml",
			"herald replay --brokers 127.0.0.1:1001 --clickhouse-addr 127.0.0.1:1003 --config /c/herald.yaml"},
		{".cache/bin/herald is the test's build", ".cache/bin/herald audit timeline\n(.cache/bin/herald id)", "/b/herald audit timeline\n(/b/herald id)"},
		{"scripts/dev starts on its own ports and is interrupted", "scripts/dev     # run herald", "HERALD_STATE_DIR=/s start_and_stop scripts/dev --http-addr 127.0.0.1:1005     # run herald"},
		{"scripts/test is parsed, not run", "scripts/test    # the whole suite", "bash -n scripts/test # the whole suite"},
		{"go test over ./... runs one package", "go test -short ./...", "go test -short ./identity"},
		{"a mutation run is a dry run", "scripts/mutation/mutation ./internal/stage", "HERALD_MUTATION_DRY_RUN=1 scripts/mutation/mutation ./internal/stage"},
		{"the chaos suite parses its flags, then prints its help", "go run ./scripts/chaos --duration 90s --seed 1     # about 4 min",
			"go run ./scripts/chaos --duration 90s --seed 1 -h     # about 4 min"},
		{"the chaos suite without a comment gets -h too", "go run ./scripts/chaos --seed 8", "go run ./scripts/chaos --seed 8 -h"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := rewrite(docRules(a), c.shown, map[string]bool{}); got != c.run {
				t.Fatalf("%q runs as %q, want %q", c.shown, got, c.run)
			}
		})
	}
}

// docPrelude starts every block's script: it stops at the first failure,
// and makes a curl answered 4xx or 5xx one (-s stays quiet otherwise).
// start_and_stop runs a command that serves until Ctrl-C (scripts/dev):
// once it printed "is up" it gets SIGINT, as its process group would from
// Ctrl-C, and its exit status is start_and_stop's (it fails, with the
// command's output, if the command ends before).
const docPrelude = `set -euo pipefail
curl() { command curl --fail-with-body --max-time 30 "$@"; }
start_and_stop() {
	local log pid n=0
	log=$(mktemp)
	set -m
	"$@" >"$log" 2>&1 &
	pid=$!
	set +m
	until grep -q ' is up: ' "$log"; do
		if ! kill -0 "$pid" 2>/dev/null || [ "$n" -ge 900 ]; then
			kill -INT -- -"$pid" 2>/dev/null || true
			wait "$pid" || true
			cat "$log"
			return 1
		fi
		n=$((n + 1))
		sleep 1
	done
	grep ' is up: ' "$log"
	kill -INT -- -"$pid"
	wait "$pid"
}
`

func TestStartAndStopInterruptsACommandOnceItIsUp(t *testing.T) {
	for _, c := range []struct {
		name, cmd string
		ok        bool
	}{
		{"a command that shuts down cleanly on Ctrl-C passes",
			`sh -c 'trap "exit 0" INT; echo "x is up: now"; while :; do sleep 0.1; done'`, true},
		{"a command that fails on Ctrl-C fails",
			`sh -c 'trap "exit 3" INT; echo "x is up: now"; while :; do sleep 0.1; done'`, false},
		{"a command that ends before it is up fails",
			`sh -c 'echo starting; exit 0'`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := exec.Command("bash", "-c", docPrelude+"start_and_stop "+c.cmd).CombinedOutput()
			if (err == nil) != c.ok {
				t.Fatalf("start_and_stop %s: %v, want success %v\n%s", c.cmd, err, c.ok, out)
			}
		})
	}
}

// TestEveryShellCommandInTheDocsRunsAgainstHeraldDev runs every shell
// block of README.md and docs/*.md (every ``` block but those fenced as
// text, yaml or another language: shellLangs), in order, against a herald
// dev of its own, each rewritten by docRules, so the docs cannot rot: a
// command that fails, or a curl answered 4xx or 5xx, fails the test, and
// a shell block added to the docs is run with the others.
func TestEveryShellCommandInTheDocsRunsAgainstHeraldDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts herald dev with the chDB server; runs in the full suite")
	}
	if _, err := chdb.FindLib(); err != nil {
		t.Fatalf("chDB engine missing (scripts/install installs it): %v", err)
	}
	blocks := shellBlocks(t, docFiles(t))
	if len(blocks) < 6 {
		t.Fatalf("%d shell blocks in the docs; the README alone has 6", len(blocks))
	}
	bin := testenv.Herald(t)
	a := devAddrs{kafka: testenv.FreePort(t), http: testenv.FreePort(t), chTCP: testenv.FreePort(t), chHTTP: testenv.FreePort(t), bin: bin,
		config: filepath.Join(t.TempDir(), "herald.yaml"), scriptsDir: t.TempDir()}
	a.scriptsDev = fmt.Sprintf("--http-addr 127.0.0.1:%d --kafka-port %d --clickhouse-tcp-port %d --clickhouse-http-port %d",
		testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t))
	if err := os.WriteFile(a.config, fmt.Appendf(nil, "brokers: [127.0.0.1:%d]\nclickhouse-addr: 127.0.0.1:%d\n", a.kafka, a.chTCP), 0o600); err != nil {
		t.Fatal(err)
	}
	dev := startDev(t, bin, t.TempDir(), a.kafka, a.http, a.chTCP, a.chHTTP)
	rules := docRules(a)
	used := map[string]bool{}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		script := rewrite(rules, b.text, used)
		name := fmt.Sprintf("%s:%d", strings.TrimPrefix(b.file, "../../"), b.line)
		t.Run(name+" runs", func(t *testing.T) {
			// A guard, not a timed assertion: what a block reads (the audit
			// in ClickHouse, a delivery's outcome) may land a moment after
			// the block before it wrote; every block is safe to run again
			// (idempotency keys, PUTs, reads).
			var out []byte
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
				cmd := exec.Command("bash", "-c", docPrelude+script)
				cmd.Dir = root
				cmd.Env = append(os.Environ(), "COLUMNS=100", "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
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
	// The README's step 4 is a browser's: herald dev's dashboard opens
	// with the development key filled in, and its first data request
	// (answered 200: herald dev accepts no other key) loads the page.
	t.Run("README.md: herald dev's dashboard opens with the development key and loads with it, in Chromium", func(t *testing.T) {
		origin := fmt.Sprintf("http://127.0.0.1:%d", a.http)
		b := testenv.Chromium(t, origin)
		ctx, cancel := context.WithTimeout(b.Ctx, 3*time.Minute)
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.Navigate(origin+"/dashboard")); err != nil {
			t.Fatal(err)
		}
		state, err := chromedp.Run(ctx, chromedp.Poll[string](`["loaded", "problem", "needs-key"].includes(document.body.dataset.state) && document.body.dataset.state`,
			chromedp.WithPollingTimeout(time.Minute)))
		if err != nil {
			t.Fatal(err)
		}
		key, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("api-key").value`))
		if err != nil {
			t.Fatal(err)
		}
		first, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
			const r = performance.getEntriesByType("resource").find((e) => new URL(e.name).pathname.startsWith("/v1/dashboard/"));
			return r ? new URL(r.name).pathname + " " + r.responseStatus : "none";
		})()`))
		if err != nil {
			t.Fatal(err)
		}
		if key != api.DevAPIKey {
			t.Errorf("the key field holds %q, want the development key %q", key, api.DevAPIKey)
		}
		if !strings.HasPrefix(first, "/v1/dashboard/") || !strings.HasSuffix(first, " 200") {
			t.Errorf("the first data request: %q, want one to /v1/dashboard/ answered 200", first)
		}
		if state != "loaded" {
			problem, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("problem").textContent`))
			t.Errorf("the page's state is %q (%s), want loaded", state, problem)
		}
	})
	for _, r := range rules {
		if !used[r.why] {
			t.Errorf("the rule %q (%s) rewrote no block: remove it", r.why, r.re)
		}
	}
}
