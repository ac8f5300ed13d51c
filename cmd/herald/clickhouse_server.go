package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/chdb"
)

// runClickHouseServer implements
//
//	herald clickhouse-server --path DIR [--tcp-port 39000] [--http-port 39123] [--lib PATH] [--max-memory-mb N]
//
// It serves ClickHouse from the embedded chDB engine on 127.0.0.1 until
// SIGINT or SIGTERM, then stops the engine gracefully. The process is the
// server: herald dev and scripts/clickhouse/clickhouse start it as a child.
func runClickHouseServer(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("clickhouse-server")
	path := fs.String("path", "", "data directory (required; created if missing)")
	tcpPort := fs.Int("tcp-port", 39000, "native protocol port on 127.0.0.1")
	httpPort := fs.Int("http-port", 39123, "HTTP interface port on 127.0.0.1 (GET /ping answers \"Ok.\")")
	lib := fs.String("lib", "", "path of libchdb.so (default: $"+chdb.LibEnv+", then <repo>/"+chdb.LibRelPath+")")
	logLevel := fs.String("chdb-log-level", "", "ClickHouse's own log level on stderr: "+strings.Join(chdb.LogLevels, ", ")+" (default: errors only)")
	maxMemory := fs.Int("max-memory-mb", 0, "cap on the server's memory in MiB (default 0: ClickHouse's own, 90% of the RAM)")
	stopTimeout := fs.Duration("stop-timeout", 15*time.Second, "how long a graceful stop may take before the process exits anyway")
	// chdb.ServeOptions.Validate's rules (its CheckPort and CheckLogLevel),
	// by flag and all at once (and in herald config check); Validate stays
	// the library's guard.
	atLeast(fs, "max-memory-mb", maxMemory, 0)
	positive(fs, "stop-timeout", stopTimeout)
	addCheck(fs, func() error {
		var errs []error
		for _, p := range []struct {
			name string
			v    int
		}{{"tcp-port", *tcpPort}, {"http-port", *httpPort}} {
			if err := chdb.CheckPort(p.v); err != nil {
				errs = append(errs, badField(p.name, "%v", err))
			}
		}
		if *tcpPort == *httpPort {
			errs = append(errs, badField("http-port", "must differ from --tcp-port (both %d)", *tcpPort))
		}
		if err := chdb.CheckLogLevel(*logLevel); err != nil {
			errs = append(errs, badField("chdb-log-level", "%v", err))
		}
		return errors.Join(errs...)
	})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("%w: --path (or HERALD_PATH) is required: the data directory", errUsage)
	}
	o := chdb.ServeOptions{
		Path:        *path,
		TCPPort:     *tcpPort,
		HTTPPort:    *httpPort,
		LogLevel:    *logLevel,
		MaxMemoryMB: *maxMemory,
		StopTimeout: *stopTimeout,
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	libPath := *lib
	if libPath == "" {
		p, err := chdb.FindLib()
		if err != nil {
			return err
		}
		libPath = p
	}
	started := time.Now()
	l, err := chdb.Open(libPath)
	if err != nil {
		return err
	}
	slog.Info("chdb: library loaded", "lib", libPath, "took", time.Since(started).Round(time.Millisecond))
	if err := l.Serve(ctx, o); err != nil {
		return err
	}
	slog.Info("chdb: server stopped")
	return nil
}
