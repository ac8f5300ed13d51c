package chdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/heraldhq/herald/internal/testenv"
)

func TestFindLib(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, filepath.FromSlash(LibRelPath))
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, []byte("not really a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(root, "internal", "chdb")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	missing := filepath.Join(empty, "nope", "libchdb.so")

	tests := []struct {
		name     string
		env      string
		starts   []string
		want     string   // the path found, if any
		wantErrs []string // substrings of the error, if it fails
	}{
		{
			name:   "the environment variable wins when it names an existing file",
			env:    lib,
			starts: []string{empty},
			want:   lib,
		},
		{
			name:     "a missing file in the environment variable is an error naming it",
			env:      missing,
			starts:   []string{root},
			wantErrs: []string{LibEnv, missing},
		},
		{
			name:   "the repository's .cache is found from a package directory below it",
			starts: []string{deep},
			want:   lib,
		},
		{
			name:   "the executable's directory is searched after the working directory",
			starts: []string{empty, filepath.Join(root, ".cache", "bin")},
			want:   lib,
		},
		{
			name:   "nothing found says where it looked and how to install",
			starts: []string{empty, empty},
			wantErrs: []string{
				"scripts/clickhouse/clickhouse install",
				"@chdb/lib-linux-x64-gnu@" + Version,
				LibEnv,
				empty,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findLib(tt.env, tt.starts)
			if tt.wantErrs == nil {
				if err != nil || got != tt.want {
					t.Fatalf("findLib = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("findLib = %q; want an error", got)
			}
			if !errors.Is(err, ErrLibNotFound) {
				t.Errorf("error %v is not ErrLibNotFound", err)
			}
			for _, s := range tt.wantErrs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if n := strings.Count(err.Error(), empty); tt.env == "" && n > 1 {
				t.Errorf("error names %s %d times", empty, n)
			}
		})
	}
}

func TestServeOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		o       ServeOptions
		wantErr string
	}{
		{"complete options are valid", ServeOptions{Path: "d", TCPPort: 1, HTTPPort: 2, LogLevel: "warning"}, ""},
		{"a data directory is required", ServeOptions{TCPPort: 1, HTTPPort: 2}, "Path"},
		{"a zero port is refused (the address would be unknown)", ServeOptions{Path: "d", TCPPort: 0, HTTPPort: 2}, "TCPPort"},
		{"ports above 65535 are refused", ServeOptions{Path: "d", TCPPort: 1, HTTPPort: 70000}, "HTTPPort"},
		{"the two ports must differ", ServeOptions{Path: "d", TCPPort: 5, HTTPPort: 5}, "both 5"},
		{"a negative memory cap is refused", ServeOptions{Path: "d", TCPPort: 1, HTTPPort: 2, MaxMemoryMB: -1}, "MaxMemoryMB"},
		{"an unknown log level is refused", ServeOptions{Path: "d", TCPPort: 1, HTTPPort: 2, LogLevel: "info"}, "information"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v; want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestServeArgvListensOnLoopbackOnly(t *testing.T) {
	argv := ServeOptions{Path: "/data", TCPPort: 39000, HTTPPort: 39123}.argv("q1")
	joined := strings.Join(argv, " ")
	for _, want := range []string{"--path=/data", "--listen_host=127.0.0.1", "--tcp_port=39000", "--http_port=39123", "--query_id=q1", "SYSTEM START LISTEN TCP", "SYSTEM START LISTEN HTTP"} {
		if !strings.Contains(joined, want) {
			t.Errorf("argv %q lacks %q", argv, want)
		}
	}
	if strings.Contains(joined, "0.0.0.0") || strings.Contains(joined, "::") {
		t.Errorf("argv %q listens beyond loopback", argv)
	}
}

func TestServeArgvPutsConfigOverridesLast(t *testing.T) {
	argv := ServeOptions{Path: "/data", TCPPort: 39000, HTTPPort: 39123, MaxMemoryMB: 2}.argv("q1")
	n := len(argv)
	if n < 2 || argv[n-2] != "--" || argv[n-1] != "--max_server_memory_usage=2097152" {
		t.Errorf("argv ends %q; want -- --max_server_memory_usage=2097152", argv[max(0, n-2):])
	}
}

// TestServer talks to the chDB test server as herald does, over both
// protocols clickhouse-go speaks.
func TestServer(t *testing.T) {
	addr, db := testenv.ClickHouseDB(t)
	httpAddr := testenv.ClickHouseHTTP(t)

	protocols := []struct {
		name  string
		addr  string
		proto clickhouse.Protocol
	}{
		{"the native protocol", addr, clickhouse.Native},
		{"the HTTP protocol", httpAddr, clickhouse.HTTP},
	}
	for _, p := range protocols {
		t.Run(p.name+" creates a MergeTree table, inserts a batch and reads it back", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			conn := open(t, p.addr, p.proto, db)

			var version string
			if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
				t.Fatalf("SELECT version(): %v", err)
			}
			if !strings.HasPrefix(version, "26.") {
				t.Errorf("version() = %q; want 26.x", version)
			}

			table := "events_" + p.proto.String()
			if err := conn.Exec(ctx, "CREATE TABLE "+table+` (
				id UInt64,
				kind LowCardinality(String),
				at DateTime64(3, 'UTC')
			) ENGINE = MergeTree ORDER BY id`); err != nil {
				t.Fatalf("CREATE TABLE: %v", err)
			}
			const rows = 1000
			base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+table)
			if err != nil {
				t.Fatalf("PrepareBatch: %v", err)
			}
			for i := range rows {
				if err := batch.Append(uint64(i), fmt.Sprintf("kind_%d", i%3), base.Add(time.Duration(i)*time.Millisecond)); err != nil {
					t.Fatalf("Append row %d: %v", i, err)
				}
			}
			if err := batch.Send(); err != nil {
				t.Fatalf("Send: %v", err)
			}

			var (
				count, sum uint64
				kinds      uint64
				last       time.Time
			)
			if err := conn.QueryRow(ctx, "SELECT count(), sum(id), uniqExact(kind), max(at) FROM "+table).Scan(&count, &sum, &kinds, &last); err != nil {
				t.Fatalf("SELECT: %v", err)
			}
			if count != rows || sum != rows*(rows-1)/2 || kinds != 3 || !last.Equal(base.Add((rows-1)*time.Millisecond)) {
				t.Errorf("read back count=%d sum=%d kinds=%d max(at)=%s; want %d, %d, 3, %s",
					count, sum, kinds, last, rows, rows*(rows-1)/2, base.Add((rows-1)*time.Millisecond))
			}

			var engine string
			if err := conn.QueryRow(ctx, "SELECT engine FROM system.databases WHERE name = currentDatabase()").Scan(&engine); err != nil {
				t.Fatalf("database engine: %v", err)
			}
			if engine != "Atomic" {
				t.Errorf("test database engine = %q; want Atomic", engine)
			}
		})
	}
}

// TestServeKeepAliveQuerySleeps checks the query that keeps the server alive
// reads one row a second instead of spinning through system.numbers (which
// it does if the sleep is optimised away: two cores flat out, for ever).
func TestServeKeepAliveQuerySleeps(t *testing.T) {
	addr := testenv.ClickHouse(t)
	conn := open(t, addr, clickhouse.Native, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		readRows uint64
		elapsed  float64
	)
	err := conn.QueryRow(ctx, `SELECT read_rows, elapsed FROM system.processes
		WHERE query_id LIKE 'herald-chdb-serve-%' ORDER BY elapsed DESC LIMIT 1`).Scan(&readRows, &elapsed)
	if err != nil {
		t.Fatalf("find the keep-alive query in system.processes (is the server `herald clickhouse-server`?): %v", err)
	}
	// One row per second, plus slack for the block being read.
	if limit := uint64(elapsed) + 10; readRows > limit {
		t.Errorf("keep-alive query read %d rows in %.0fs; want at most %d: it is spinning, not sleeping", readRows, elapsed, limit)
	}
}

// TestInsertDeduplication pins the behaviour the audit writer's exactly-once
// inserts rely on: on a non-replicated MergeTree with
// non_replicated_deduplication_window > 0, a retried insert carrying the same
// insert_deduplication_token is dropped, whether the insert is synchronous
// or (this server's default) asynchronous.
func TestInsertDeduplication(t *testing.T) {
	addr, db := testenv.ClickHouseDB(t)
	conn := open(t, addr, clickhouse.Native, db)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, async := range []int{0, 1} {
		t.Run(fmt.Sprintf("with async_insert=%d a retried token is stored once", async), func(t *testing.T) {
			table := fmt.Sprintf("audit_async%d", async)
			if err := conn.Exec(ctx, "CREATE TABLE "+table+` (id UInt64, v String)
				ENGINE = MergeTree ORDER BY id
				SETTINGS non_replicated_deduplication_window = 1000`); err != nil {
				t.Fatalf("CREATE TABLE: %v", err)
			}
			insert := func(token string, ids ...uint64) {
				t.Helper()
				ictx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
					"async_insert":               async,
					"wait_for_async_insert":      1,
					"insert_deduplication_token": token,
				}))
				batch, err := conn.PrepareBatch(ictx, "INSERT INTO "+table)
				if err != nil {
					t.Fatalf("PrepareBatch: %v", err)
				}
				for _, id := range ids {
					if err := batch.Append(id, fmt.Sprint("v", id)); err != nil {
						t.Fatal(err)
					}
				}
				if err := batch.Send(); err != nil {
					t.Fatalf("Send (token %s): %v", token, err)
				}
			}
			count := func() uint64 {
				t.Helper()
				var n uint64
				if err := conn.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}

			insert("offsets-0-99", 1, 2, 3)
			insert("offsets-0-99", 1, 2, 3) // the retry
			if n := count(); n != 3 {
				t.Errorf("after a retry with the same token: %d rows; want 3", n)
			}
			insert("offsets-100-199", 1, 2, 3) // same rows, new token: a new batch
			if n := count(); n != 6 {
				t.Errorf("after the same rows with a new token: %d rows; want 6", n)
			}
		})
	}
}

func open(t *testing.T, addr string, proto clickhouse.Protocol, db string) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{addr},
		Protocol:    proto,
		Auth:        clickhouse.Auth{Database: db},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("connect %s over %s: %v", addr, proto, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
