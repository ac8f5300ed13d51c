package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/analytics/dashboard/dashboardtest"
	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/topics"
)

func TestAPICommandFlags(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("acme:svc:not-hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"--hash-key prints the sha256 of a key for the key file", []string{"--hash-key", "s3cret"}, 0, api.HashKey("s3cret") + "\n", ""},
		{"a key file with a bad line is a usage error naming the file", []string{"--api-keys", bad, "--brokers", "127.0.0.1:1"}, 2, "", "line 1"},
		{"a missing key file is a usage error", []string{"--api-keys", filepath.Join(dir, "none"), "--brokers", "127.0.0.1:1"}, 2, "", "--api-keys"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"api"}, tc.args...), &out, &errb)
			if code != tc.wantCode || out.String() != tc.wantOut || !strings.Contains(errb.String(), tc.wantErr) {
				t.Fatalf("code %d, stdout %q, stderr %q; want %d, %q, stderr containing %q", code, out.String(), errb.String(), tc.wantCode, tc.wantOut, tc.wantErr)
			}
		})
	}
}

// startAPICommand runs `herald api` on a new topic catalog of one
// partition, with the key k1 of tenant acme, until it is healthy. It
// returns its address, its catalog, and cancel, which stops it and returns
// its exit code.
func startAPICommand(t *testing.T, brokers []string) (addr string, cat *topics.Catalog, cancel func() int) {
	t.Helper()
	cat = testenv.Catalog(t, brokers, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("acme:billing:"+api.HashKey("k1")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		var out, errb bytes.Buffer
		done <- run(ctx, []string{"api", "--brokers", strings.Join(brokers, ","), "--topic-prefix", cat.Options().Prefix,
			"--partitions", "1", "--listen", addr, "--api-keys", keys, "--instance-id", "cmd-test"}, &out, &errb)
	}()
	stopped := false
	cancel = func() int {
		if stopped {
			return 0
		}
		stopped = true
		stop()
		return <-done
	}
	t.Cleanup(func() { cancel() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			var h struct{ Status string }
			json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if h.Status == "ok" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("herald api did not become healthy: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return addr, cat, cancel
}

func TestAPICommandServesUntilCancelled(t *testing.T) {
	addr, _, cancel := startAPICommand(t, testenv.Kafka(t))
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/users/u/devices", nil)
	req.Header.Set("Authorization", "Bearer k1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET devices with the configured key: %d", resp.StatusCode)
	}
	for _, c := range []struct {
		path, contentType string
		status            int
	}{
		{"/sdk/herald-sw.js", "text/javascript; charset=utf-8", 200},
		{"/sdk/herald.js", "text/javascript; charset=utf-8", 200},
		{"/", "application/problem+json", 404}, // the demo page only with --demo
	} {
		resp, err := http.Get("http://" + addr + c.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != c.contentType {
			t.Errorf("GET %s: %d %s, want %d %s", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.status, c.contentType)
		}
	}
	if code := cancel(); code != 0 {
		t.Fatalf("exit code %d after cancel, want 0", code)
	}
}

// TestAPICommandServesTheDashboardFromClickHouse runs herald api with
// --clickhouse-addr and --database over known audit rows: the page is
// served, and a key of tenant acme reads acme's decisions by reason.
func TestAPICommandServesTheDashboardFromClickHouse(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 1)
	db := dashboardtest.Populate(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("acme:billing:"+api.HashKey("k1")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		var out bytes.Buffer
		done <- run(ctx, []string{"api", "--brokers", strings.Join(brokers, ","), "--topic-prefix", cat.Options().Prefix,
			"--partitions", "1", "--listen", addr, "--api-keys", keys, "--instance-id", "cmd-dash-test",
			"--clickhouse-addr", db.Addr, "--database", db.Name}, &out, &errb)
	}()
	get := func(path string) (int, []byte) {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code, _ := get("/dashboard"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("herald api never served /dashboard")
		}
	}
	code, body := get("/v1/dashboard/decisions")
	var dec struct{ Reasons []struct{ Decisions uint64 } }
	if err := json.Unmarshal(body, &dec); code != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/dashboard/decisions: %d %s", code, body)
	}
	var got, want uint64
	for _, r := range dec.Reasons {
		got += r.Decisions
	}
	for _, d := range db.Rows.Decisions {
		if d.Tenant == "acme" {
			want++
		}
	}
	if got != want {
		t.Fatalf("%d decisions of acme, want %d", got, want)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d after cancel, want 0: %s", code, errb.String())
	}
}
