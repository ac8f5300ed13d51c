package testenv

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// WebPushService starts the npm package web-push-testing (installed into
// .cache/web-push-testing by scripts/install.d/web-push-testing) as a real
// Web Push service on a free port for this test, stopped on cleanup, and
// returns its base URL. Skipped under -short; fails when the package or
// node is missing.
func WebPushService(t testing.TB) string {
	t.Helper()
	skipShort(t, "the web-push-testing push service")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("testenv: node is not on PATH (scripts/install installs it): %v", err)
	}
	server := os.Getenv("HERALD_TEST_WEB_PUSH_TESTING")
	if server == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		server = filepath.Join(root, ".cache", "web-push-testing", "node_modules", "web-push-testing")
	}
	script := filepath.Join(server, "src", "bin", "server.js")
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("testenv: web-push-testing is not installed (run scripts/install.d/web-push-testing): %v", err)
	}
	port := FreePort(t)
	cmd := exec.Command(node, script, strconv.Itoa(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start web-push-testing: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	ready := make(chan string, 1)
	go func() {
		var log []string
		for lines.Scan() {
			log = append(log, lines.Text())
			if strings.Contains(lines.Text(), "Server running on port") {
				ready <- ""
			}
		}
		ready <- strings.Join(log, "\n")
	}()
	select {
	case msg := <-ready:
		if msg != "" || !serving(port) {
			t.Fatalf("testenv: web-push-testing exited:\n%s", msg)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("testenv: web-push-testing did not start in 30 s")
	}
	return fmt.Sprintf("http://localhost:%d", port)
}

func serving(port int) bool {
	resp, err := http.Post(fmt.Sprintf("http://localhost:%d/status", port), "application/json", nil)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// moduleRoot is the directory of herald's go.mod, above the working
// directory (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
