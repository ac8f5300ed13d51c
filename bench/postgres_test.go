package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
)

func TestPostgresBackend(t *testing.T) {
	dsn := testenv.Postgres(t) // scripts/test starts it
	s := generate(t, StreamOptions{Requests: 3000, RepeatRatio: 0.3, Seed: 12})
	for _, conns := range []int{1, 3} {
		t.Run(fmt.Sprintf("with %d connections every variant accepts the distinct notifications", conns), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rows, err := RunPostgres(ctx, s, PostgresOptions{DSN: dsn, Batch: 250, Conns: conns})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 3 {
				t.Fatalf("%d rows, want 3", len(rows))
			}
			if err := CheckAccepted(s, rows); err != nil {
				t.Fatal(err)
			}
		})
	}
}
