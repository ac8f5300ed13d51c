package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// EnvTestRedis names the Redis address (host:port) the Redis backend's
// test runs against. Redis is not one of the suite's standard components:
// the test runs only when the variable is set (scripts/bench starts a
// server on 127.0.0.1:36379).
const EnvTestRedis = "HERALD_TEST_REDIS"

func TestRedisBackend(t *testing.T) {
	addr := os.Getenv(EnvTestRedis)
	if addr == "" || testing.Short() {
		t.Skipf("needs Redis: runs only when %s is set to host:port (scripts/bench starts one), and not under -short", EnvTestRedis)
	}
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
