package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/heraldhq/herald/analytics/migrations"
)

// The ClickHouse test server (chDB, started by scripts/clickhouse/clickhouse
// or scripts/test) is found through these variables.
const (
	EnvClickHouseAddr = "HERALD_TEST_CLICKHOUSE_ADDR" // native protocol, e.g. 127.0.0.1:39000
	EnvClickHouseHTTP = "HERALD_TEST_CLICKHOUSE_HTTP" // HTTP interface, e.g. 127.0.0.1:39123
)

const chStartHint = "start it with `scripts/clickhouse/clickhouse start` and export " +
	EnvClickHouseAddr + "=127.0.0.1:39000 " + EnvClickHouseHTTP + "=127.0.0.1:39123 (or run scripts/test)"

// chReachable remembers, per address and protocol, whether the server
// answered a ping, so each test binary pings once.
var chReachable sync.Map // key string -> *chProbe

type chProbe struct {
	once sync.Once
	err  error
}

// ClickHouse returns the native protocol address of the test ClickHouse
// server. It skips the test under -short, and fails it in the full suite when
// HERALD_TEST_CLICKHOUSE_ADDR is unset or the server does not answer.
func ClickHouse(t testing.TB) string {
	t.Helper()
	return chAddr(t, EnvClickHouseAddr, clickhouse.Native)
}

// ClickHouseHTTP returns the HTTP address (host:port) of the test ClickHouse
// server, for clickhouse.Options{Protocol: clickhouse.HTTP}. Same rules as
// ClickHouse, with HERALD_TEST_CLICKHOUSE_HTTP.
func ClickHouseHTTP(t testing.TB) string {
	t.Helper()
	return chAddr(t, EnvClickHouseHTTP, clickhouse.HTTP)
}

func chAddr(t testing.TB, env string, proto clickhouse.Protocol) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the test ClickHouse server; skipped under -short")
	}
	addr := os.Getenv(env)
	if addr == "" {
		t.Fatalf("testenv: %s is not set: this test needs the ClickHouse test server; %s", env, chStartHint)
	}
	p, _ := chReachable.LoadOrStore(proto.String()+" "+addr, &chProbe{})
	probe := p.(*chProbe)
	probe.once.Do(func() { probe.err = chPing(addr, proto) })
	if probe.err != nil {
		t.Fatalf("testenv: ClickHouse at %s=%s does not answer: %v; %s", env, addr, probe.err, chStartHint)
	}
	return addr
}

func chPing(addr string, proto clickhouse.Protocol) error {
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{addr},
		Protocol:    proto,
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return conn.Ping(ctx)
}

// ClickHouseDB creates a fresh, uniquely named database (engine Atomic) on
// the test ClickHouse server for this test, drops it when the test ends, and
// returns the native address and the database name. Give the name to
// clickhouse.Options.Auth.Database, or qualify tables with it. (The server's
// `default` database uses chDB's Overlay engine; tests never use it.)
func ClickHouseDB(t testing.TB) (addr, database string) {
	t.Helper()
	addr = ClickHouse(t)
	database = chDBName(t.Name())

	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("testenv: connect to ClickHouse at %s: %v", addr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.Exec(ctx, "CREATE DATABASE `"+database+"` ENGINE = Atomic"); err != nil {
		conn.Close()
		t.Fatalf("testenv: create ClickHouse database %s: %v", database, err)
	}
	t.Cleanup(func() {
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS `"+database+"` SYNC"); err != nil {
			t.Errorf("testenv: drop ClickHouse database %s: %v", database, err)
		}
	})
	return addr, database
}

// chDBName turns a test name into a database name: herald_test_, the test
// name in lower case with every other character as _, cut to 40
// characters, and 8 random hex digits.
func chDBName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:]) // never fails: crypto/rand crashes the program instead
	return "herald_test_" + strings.Trim(b.String(), "_") + "_" + hex.EncodeToString(rnd[:])
}

// AuditDB is ClickHouseDB with herald's migrations applied: an empty audit
// database, and a connection to it (closed when the test ends).
func AuditDB(t testing.TB) (conn driver.Conn, addr, database string) {
	t.Helper()
	addr, database = ClickHouseDB(t)
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Auth: clickhouse.Auth{Database: database}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := migrations.Apply(context.Background(), conn, migrations.Options{Database: database}); err != nil {
		t.Fatalf("testenv: migrate ClickHouse database %s: %v", database, err)
	}
	return conn, addr, database
}
