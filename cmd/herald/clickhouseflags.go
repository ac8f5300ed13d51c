package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/heraldhq/herald/analytics/migrations"
)

// clickhouseFlags are the flags every command that talks to ClickHouse
// shares. The password is best given as HERALD_CLICKHOUSE_PASSWORD; it is
// never logged.
type clickhouseFlags struct {
	addr     string
	database string
	user     string
	password string
	tls      tlsFlags
	// optional: an empty --clickhouse-addr is allowed, and means none
	// (herald api, where ClickHouse backs the dashboard only).
	optional bool
}

func (c *clickhouseFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "clickhouse-addr", "127.0.0.1:9000", "ClickHouse native protocol address (host:port), comma separated for several")
	fs.StringVar(&c.database, "database", "herald", "ClickHouse database holding herald's audit tables (never chDB's Overlay 'default')")
	fs.StringVar(&c.user, "clickhouse-user", "default", "ClickHouse user")
	fs.StringVar(&c.password, "clickhouse-password", "", "ClickHouse password (prefer the environment: HERALD_CLICKHOUSE_PASSWORD)")
	c.tls.register(fs, "clickhouse", "ClickHouse")
	addCheck(fs, c.check)
}

func (c *clickhouseFlags) addrs() []string {
	var addrs []string
	for _, a := range strings.Split(c.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// check reports every bad ClickHouse setting but the TLS ones (tlsFlags
// checks those).
func (c *clickhouseFlags) check() error {
	var errs []error
	if err := migrations.ValidDatabase(c.database); err != nil {
		errs = append(errs, badField("database", "%v", err))
	}
	if len(c.addrs()) == 0 && !c.optional {
		errs = append(errs, badField("clickhouse-addr", "is empty"))
	}
	for _, a := range c.addrs() {
		if err := checkHostPort(a, false); err != nil {
			errs = append(errs, badField("clickhouse-addr", "%v", err))
		}
	}
	return errors.Join(errs...)
}

// open connects and pings. The connection's default database is the
// server's: herald's code qualifies every table with --database, and the
// database may not exist yet (herald migrate creates it).
func (c *clickhouseFlags) open(ctx context.Context) (driver.Conn, error) {
	return c.openWith(ctx, "")
}

// openInDatabase connects with --database as the default database, for SQL
// that names tables unqualified (the analysts' queries).
func (c *clickhouseFlags) openInDatabase(ctx context.Context) (driver.Conn, error) {
	return c.openWith(ctx, c.database)
}

func (c *clickhouseFlags) openWith(ctx context.Context, database string) (driver.Conn, error) {
	conn, err := c.dial(database)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := conn.Ping(pctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("clickhouse: ping %s: %w", c.addr, err)
	}
	return conn, nil
}

// dial makes the connection pool without contacting the server: the first
// query connects.
func (c *clickhouseFlags) dial(database string) (driver.Conn, error) {
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	tlsConfig, err := c.tls.config()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	slog.Info("clickhouse connection", "addr", c.addr, "user", c.user, "security", c.tls.describe())
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        c.addrs(),
		TLS:         tlsConfig,
		Auth:        clickhouse.Auth{Database: database, Username: c.user, Password: c.password},
		DialTimeout: 10 * time.Second,
		Compression: &clickhouse.Compression{Method: clickhouse.CompressionLZ4},
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse: open %s: %w", c.addr, err)
	}
	return conn, nil
}
