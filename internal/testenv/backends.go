package testenv

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// PostgreSQL and Redis serve only the bench package's seed-design backends;
// scripts/backends/backends starts them (scripts/test and scripts/bench call
// it) and prints these variables.
const (
	EnvPostgres = "HERALD_TEST_POSTGRES" // a DSN, e.g. postgres://postgres@127.0.0.1:35432/postgres?sslmode=disable
	EnvRedis    = "HERALD_TEST_REDIS"    // host:port, e.g. 127.0.0.1:36379
)

const backendsStartHint = "start them with `scripts/backends/backends start` and " +
	"`eval \"$(scripts/backends/backends env)\"` (or run scripts/test)"

// Postgres returns the DSN of the PostgreSQL server the full suite runs
// against. It skips t under -short, and fails t when EnvPostgres is unset or
// nothing listens at its address.
func Postgres(t testing.TB) string {
	t.Helper()
	skipShort(t, "PostgreSQL")
	dsn := os.Getenv(EnvPostgres)
	if dsn == "" {
		t.Fatalf("testenv: %s is not set; %s", EnvPostgres, backendsStartHint)
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Fatalf("testenv: %s=%q is not a postgres:// URL with a host", EnvPostgres, dsn)
	}
	dialBackend(t, "PostgreSQL", u.Host)
	return dsn
}

// Redis returns the address of the Redis server the full suite runs
// against. It skips t under -short, and fails t when EnvRedis is unset or
// nothing listens there.
func Redis(t testing.TB) string {
	t.Helper()
	skipShort(t, "Redis")
	addr := os.Getenv(EnvRedis)
	if addr == "" {
		t.Fatalf("testenv: %s is not set; %s", EnvRedis, backendsStartHint)
	}
	dialBackend(t, "Redis", addr)
	return addr
}

func dialBackend(t testing.TB, what, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("testenv: %s at %s is not reachable (%v); %s", what, addr, err, backendsStartHint)
	}
	c.Close()
}
