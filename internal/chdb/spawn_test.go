package chdb

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/heraldhq/herald/internal/testenv"
)

// childEnv makes the test binary act as `herald clickhouse-server`, so
// Spawn can be tested without building herald.
const childEnv = "HERALD_CHDB_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// runChild is a minimal `herald clickhouse-server`.
func runChild(args []string) int {
	if len(args) == 0 || args[0] != "clickhouse-server" {
		fmt.Fprintf(os.Stderr, "child: want clickhouse-server, got %q\n", args)
		return 2
	}
	fs := flag.NewFlagSet("clickhouse-server", flag.ContinueOnError)
	var o ServeOptions
	fs.StringVar(&o.Path, "path", "", "")
	fs.IntVar(&o.TCPPort, "tcp-port", 0, "")
	fs.IntVar(&o.HTTPPort, "http-port", 0, "")
	fs.StringVar(&o.LogLevel, "chdb-log-level", "", "")
	fs.DurationVar(&o.StopTimeout, "stop-timeout", 0, "")
	fs.IntVar(&o.MaxMemoryMB, "max-memory-mb", 0, "")
	lib := fs.String("lib", "", "")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	l, err := Open(*lib)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := l.Serve(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestSpawnReportsAChildThatDiesAtStart(t *testing.T) {
	// /bin/sh treats "clickhouse-server" as a script to run, finds none and
	// exits: a stand-in for a herald binary that fails at start.
	_, err := Spawn(context.Background(), "/bin/sh", ServeOptions{
		Path:     t.TempDir(),
		TCPPort:  testenv.FreePort(t),
		HTTPPort: testenv.FreePort(t),
	})
	if err == nil {
		t.Fatal("Spawn succeeded; want an error")
	}
	for _, want := range []string{"exited before listening", "clickhouse-server"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestSpawnRefusesAPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().(*net.TCPAddr).Port
	_, err = Spawn(context.Background(), "/bin/false", ServeOptions{Path: t.TempDir(), TCPPort: busy, HTTPPort: testenv.FreePort(t)})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(busy)) {
		t.Fatalf("Spawn = %v; want an error naming port %d", err, busy)
	}
}

// TestSpawn runs a second, private chDB server as a child process, uses it,
// and stops it. It needs the installed libchdb, so it runs with the rest of
// the ClickHouse tests.
// spawnSetup skips t under -short and returns libchdb's path and this test
// binary, which acts as `herald clickhouse-server` for Spawn.
func spawnSetup(t *testing.T) (lib, exe string) {
	t.Helper()
	testenv.ClickHouse(t) // skip under -short; the full suite has chDB installed
	lib, err := FindLib()
	if err != nil {
		t.Fatal(err)
	}
	exe, err = os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(childEnv, "1")
	return lib, exe
}

func TestSpawn(t *testing.T) {
	lib, exe := spawnSetup(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Spawn(ctx, exe, ServeOptions{
		Path:        t.TempDir(),
		TCPPort:     testenv.FreePort(t),
		HTTPPort:    testenv.FreePort(t),
		LibPath:     lib,
		MaxMemoryMB: 1024,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })

	t.Run("the child serves the native protocol with its memory cap", func(t *testing.T) {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{p.TCPAddr()}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var limit string
		err = conn.QueryRow(ctx, "SELECT value FROM system.server_settings WHERE name = 'max_server_memory_usage'").Scan(&limit)
		if err != nil || limit != "1073741824" {
			t.Fatalf("max_server_memory_usage = %q, %v; want 1073741824", limit, err)
		}
	})

	t.Run("a second server on the same ports is refused", func(t *testing.T) {
		_, err := Spawn(ctx, exe, ServeOptions{Path: t.TempDir(), TCPPort: testenv.FreePort(t), HTTPPort: portOf(t, p.HTTPAddr())})
		if err == nil || !strings.Contains(err.Error(), "not free") {
			t.Fatalf("Spawn = %v; want a port-in-use error", err)
		}
	})

	t.Run("Stop stops it gracefully and frees its ports", func(t *testing.T) {
		if err := p.Stop(); err != nil {
			t.Fatalf("Stop: %v\n%s", err, p.Output())
		}
		<-p.Exited()
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("child exit code %d; want 0 (a graceful stop)\n%s", code, p.Output())
		}
		if err := Ping(ctx, portOf(t, p.HTTPAddr())); err == nil {
			t.Error("the server still answers /ping after Stop")
		}
		if err := p.Stop(); err != nil {
			t.Errorf("second Stop: %v", err)
		}
	})
}

func portOf(t *testing.T, hostport string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscan(port, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestABadHandshakeEndsTheServer records a defect of libchdb's server
// (package doc): a connection that fails its handshake, with a wrong
// password or a first packet that is not the native protocol's Hello,
// terminates the whole server process. When a chDB release fixes it this
// test fails: then drop the hazard from the package doc.
func TestABadHandshakeEndsTheServer(t *testing.T) {
	lib, exe := spawnSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name      string
		handshake func(addr string) error
	}{
		{"a wrong password", func(addr string) error {
			conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr},
				Auth: clickhouse.Auth{Username: "default", Password: "not-the-password"}})
			if err != nil {
				return err
			}
			defer conn.Close()
			return conn.Ping(ctx)
		}},
		{"a first packet that is not Hello", func(addr string) error {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte{10, 0, 0, 0})
			return err
		}},
	} {
		t.Run(tc.name+" ends the server", func(t *testing.T) {
			p, err := Spawn(ctx, exe, ServeOptions{Path: t.TempDir(), TCPPort: testenv.FreePort(t), HTTPPort: testenv.FreePort(t), LibPath: lib})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Stop() })
			_ = tc.handshake(p.TCPAddr())
			select {
			case <-p.Exited():
			case <-time.After(30 * time.Second):
				t.Fatalf("the server still runs 30 s after %s: the defect may be fixed; update the package doc", tc.name)
			}
		})
	}
}
