package main

import (
	"context"
	"flag"
	"fmt"
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
}

func (c *clickhouseFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "clickhouse-addr", "127.0.0.1:9000", "ClickHouse native protocol address (host:port), comma separated for several")
	fs.StringVar(&c.database, "database", "herald", "ClickHouse database holding herald's audit tables (never chDB's Overlay 'default')")
	fs.StringVar(&c.user, "clickhouse-user", "default", "ClickHouse user")
	fs.StringVar(&c.password, "clickhouse-password", "", "ClickHouse password (prefer the environment: HERALD_CLICKHOUSE_PASSWORD)")
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
	if err := migrations.ValidDatabase(c.database); err != nil {
		return nil, fmt.Errorf("%w: --database: %v", errUsage, err)
	}
	var addrs []string
	for _, a := range strings.Split(c.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: --clickhouse-addr (HERALD_CLICKHOUSE_ADDR) is empty", errUsage)
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        addrs,
		Auth:        clickhouse.Auth{Database: database, Username: c.user, Password: c.password},
		DialTimeout: 10 * time.Second,
		Compression: &clickhouse.Compression{Method: clickhouse.CompressionLZ4},
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse: open %s: %w", c.addr, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := conn.Ping(pctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("clickhouse: ping %s: %w", c.addr, err)
	}
	return conn, nil
}
