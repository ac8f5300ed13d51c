package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// EnvTestPostgres names the PostgreSQL DSN the Postgres backend's test runs
// against. PostgreSQL is not one of the suite's standard components: the
// test runs only when the variable is set (scripts/bench starts a server:
// postgres://postgres@127.0.0.1:35432/postgres?sslmode=disable).
const EnvTestPostgres = "HERALD_TEST_POSTGRES"

func TestPostgresBackend(t *testing.T) {
	dsn := os.Getenv(EnvTestPostgres)
	if dsn == "" || testing.Short() {
		t.Skipf("needs PostgreSQL: runs only when %s is set to a DSN (scripts/bench starts one), and not under -short", EnvTestPostgres)
	}
	s := generate(t, StreamOptions{Requests: 3000, RepeatRatio: 0.3, Seed: 12})
	for _, conns := range []int{1, 3} {
		t.Run(fmt.Sprintf("with %d connections both variants accept the distinct notifications", conns), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rows, err := RunPostgres(ctx, s, PostgresOptions{DSN: dsn, Batch: 250, Conns: conns})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 2 {
				t.Fatalf("%d rows, want 2", len(rows))
			}
			if err := CheckAccepted(s, rows); err != nil {
				t.Fatal(err)
			}
		})
	}
}
