package main

import (
	"flag"
	"log/slog"

	"github.com/heraldhq/herald/analytics/dashboard"
)

// dashboardFlags are the ClickHouse flags of herald api, where ClickHouse
// is optional: it backs the dashboard only (GET /dashboard and the
// /v1/dashboard endpoints). Without --clickhouse-addr the dashboard's
// endpoints answer 503 dashboard-not-configured and the rest of the API
// works as ever.
type dashboardFlags struct{ ch clickhouseFlags }

func (d *dashboardFlags) register(fs *flag.FlagSet) {
	d.ch.optional = true
	d.ch.register(fs)
	f := fs.Lookup("clickhouse-addr")
	f.Usage = "ClickHouse native protocol address (host:port, comma separated for several) of the audit record the dashboard reads (empty: no dashboard data)"
	f.DefValue = ""
	f.Value.Set("")
}

// source returns the dashboard's source, or nil when --clickhouse-addr is
// empty; close releases its connections. It does not wait for ClickHouse:
// while ClickHouse is down the dashboard answers 503 and the next request
// tries again, and the API starts regardless.
func (d *dashboardFlags) source() (src *dashboard.Source, close func(), err error) {
	if d.ch.addr == "" {
		slog.Info("no --clickhouse-addr: the dashboard's endpoints answer 503 dashboard-not-configured")
		return nil, func() {}, nil
	}
	conn, err := d.ch.dial(d.ch.database)
	if err != nil {
		return nil, nil, err
	}
	slog.Info("the dashboard reads ClickHouse", "addr", d.ch.addr, "database", d.ch.database)
	return &dashboard.Source{Conn: conn, Database: d.ch.database}, func() { conn.Close() }, nil
}
