package testenv

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// MailpitVersion is the mailpit scripts/install.d/mailpit installs.
const MailpitVersion = "v1.33.1"

// Mailpit is a running mailpit: a real SMTP server with an HTTP API.
type Mailpit struct {
	// SMTP is its SMTP address (host:port, no TLS, no AUTH); API the base
	// URL of its HTTP API (/api/v1/...).
	SMTP, API string
}

// StartMailpit starts mailpit (installed into .cache/mailpit-VERSION by
// scripts/install.d/mailpit, or HERALD_TEST_MAILPIT) on free ports for this
// test, with a database of its own, stopped on cleanup; args are added to
// its command line (e.g. --ignore-duplicate-ids). Skipped under -short;
// fails when mailpit is missing.
func StartMailpit(t testing.TB, args ...string) Mailpit {
	t.Helper()
	skipShort(t, "mailpit")
	bin := os.Getenv("HERALD_TEST_MAILPIT")
	if bin == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		bin = filepath.Join(root, ".cache", "mailpit-"+MailpitVersion, "mailpit")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("testenv: mailpit is not installed (run scripts/install.d/mailpit): %v", err)
	}
	m := Mailpit{SMTP: fmt.Sprintf("127.0.0.1:%d", FreePort(t))}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	m.API = "http://" + httpAddr
	var out LockedBuffer
	cmd := exec.Command(bin, append([]string{"--smtp", m.SMTP, "--listen", httpAddr,
		"--database", filepath.Join(t.TempDir(), "mailpit.db"), "--disable-version-check", "--smtp-disable-rdns", "--quiet"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start mailpit: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("testenv: mailpit exited (%v):\n%s", err, out.String())
		default:
		}
		if resp, err := http.Get(m.API + "/api/v1/info"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: mailpit did not answer in 30 s:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// LockedBuffer collects a process's output or a logger's lines, safe to
// read while they are written.
type LockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
