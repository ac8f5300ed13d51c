package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
)

func TestRedisBackend(t *testing.T) {
	addr := testenv.Redis(t) // scripts/test starts it
	s := generate(t, StreamOptions{Requests: 3000, RepeatRatio: 0.3, Seed: 13})
	for _, conns := range []int{1, 3} {
		t.Run(fmt.Sprintf("with %d connections both variants accept the distinct notifications", conns), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rows, err := RunRedis(ctx, s, RedisOptions{Addr: addr, Batch: 250, Conns: conns, Window: time.Hour})
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
