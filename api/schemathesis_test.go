package api

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldhq/herald/analytics/dashboard"
	"github.com/heraldhq/herald/analytics/dashboard/dashboardtest"
)

// TestSchemathesisFindsNoServerErrorOrSchemaMismatch runs
// scripts/schemathesis/schemathesis (schemathesis from PyPI) against a
// server on a free port, with the dedupe stage and the real broker behind
// it, and the dashboard reading a ClickHouse test database. It fails on any 5xx or any answer that disagrees with
// api/openapi.json. Full suite only.
func TestSchemathesisFindsNoServerErrorOrSchemaMismatch(t *testing.T) {
	db := dashboardtest.Populate(t)
	p := startPipeline(t, func(c *Config) {
		c.IdempotencyWait = 10 * time.Second
		c.Dashboard = &dashboard.Source{Conn: db.Conn, Database: db.Name}
	})
	script, err := filepath.Abs(filepath.Join("..", "scripts", "schemathesis", "schemathesis"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, p.url, "--seed", "4")
	cmd.Env = append(os.Environ(), "HERALD_API_KEY="+keyA)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("schemathesis failed: %v\n%s", err, tail(out, 20000))
	}
	t.Logf("%s", tail(out, 2000))
}

// tail keeps the last n bytes of a long report.
func tail(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return append([]byte("...\n"), b[len(b)-n:]...)
}
