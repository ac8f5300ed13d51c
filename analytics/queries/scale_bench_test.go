package queries_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/analytics/queries"
	"github.com/heraldhq/herald/internal/testenv"
)

// BenchmarkHitRateAtScale times the analysts' hit-rate answers over a year
// of synthetic dedupe decisions on the ClickHouse server:
// HERALD_BENCH_AUDIT_ROWS rows (1,000,000 by default; BENCHMARKS.md has
// 10M and 100M), 5 tenants × 20 types, 70 % accepted, 20 % duplicates,
// 10 % replays, spread evenly over 365 days. The rows go through the real
// migrations, so the roll-ups are filled by their materialized views as
// the audit writer's inserts fill them. Sub-benchmarks: the hit-rate query
// (hit_rate_by_type_7d.sql, over the hourly roll-up), the hit-rate view
// over 30 days, and, for scale, the same 7-day answer computed from the raw
// decisions table.
//
//	HERALD_BENCH_AUDIT_ROWS=10000000 go test -run '^$' -bench HitRateAtScale -benchtime 20x ./analytics/queries/
func BenchmarkHitRateAtScale(b *testing.B) {
	rows := int64(1_000_000)
	if s := os.Getenv("HERALD_BENCH_AUDIT_ROWS"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("HERALD_BENCH_AUDIT_ROWS=%q: want a positive number of rows", s)
		}
		rows = n
	}
	addr, db := testenv.ClickHouseDB(b)
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Auth: clickhouse.Auth{Database: db},
		DialTimeout: 5 * time.Second, ReadTimeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, conn, migrations.Options{Database: db}); err != nil {
		b.Fatal(err)
	}
	until := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	start := until.AddDate(-1, 0, 0)
	step := until.Sub(start).Milliseconds() / rows
	const chunk = 10_000_000
	t0 := time.Now()
	for from := int64(0); from < rows; from += chunk {
		n := min(chunk, rows-from)
		err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO decisions
			(kafka_topic, kafka_partition, kafka_offset, at, decision_id, stage, outcome, tenant, type, recipient, notification_id, source_topic, source_partition, source_offset)
			SELECT 'herald.decisions', toInt32(n %% 12), toInt64(n), fromUnixTimestamp64Milli(toInt64(%d + n * %d), 'UTC'),
				concat('dedupe/', toString(n)), 'dedupe',
				multiIf(n %% 10 < 7, 'accepted', n %% 10 < 9, 'duplicate', 'idempotent_replay'),
				concat('tenant-', toString(n %% 5)), concat('type.', toString(intHash32(n) %% 20)),
				concat('u', toString(intHash32(n + 1) %% 100000)), lower(hex(MD5(toString(intDiv(n, 2))))),
				'herald.requests', toInt32(n %% 12), toInt64(n)
			FROM (SELECT number AS n FROM numbers(%d, %d))`, start.UnixMilli(), step, from, n))
		if err != nil {
			b.Fatalf("insert rows %d..%d: %v", from, from+n, err)
		}
	}
	b.Logf("inserted %d decision rows in %v (%.0f rows/s)", rows, time.Since(t0).Round(time.Millisecond),
		float64(rows)/time.Since(t0).Seconds())

	hitRate, err := queries.Get("hit_rate_by_type_7d")
	if err != nil {
		b.Fatal(err)
	}
	week := map[string]string{"until": queries.Time(until)}
	cases := []struct {
		name string
		q    queries.Query
	}{
		{"hit_rate_by_type_7d.sql over the hourly roll-up", hitRate},
		{"the dedupe_hit_rate_hourly view over 30 days", queries.Query{SQL: `SELECT tenant, type, sum(hits), sum(misses)
			FROM dedupe_hit_rate_hourly WHERE hour >= {until:DateTime('UTC')} - INTERVAL 30 DAY AND hour < {until:DateTime('UTC')}
			GROUP BY tenant, type`, Params: []queries.Param{{Name: "until", Type: "DateTime('UTC')"}}}},
		{"the same 7 days from the raw decisions table", queries.Query{SQL: `SELECT tenant, type,
			countIf(outcome IN ('duplicate', 'idempotent_replay')) AS hits, countIf(outcome = 'accepted') AS misses
			FROM decisions WHERE stage = 'dedupe' AND at >= {until:DateTime('UTC')} - INTERVAL 7 DAY AND at < {until:DateTime('UTC')}
			GROUP BY tenant, type`, Params: []queries.Param{{Name: "until", Type: "DateTime('UTC')"}}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var got int
			for b.Loop() {
				r, err := c.q.Run(ctx, conn, week)
				if err != nil {
					b.Fatal(err)
				}
				got = 0
				for r.Next() {
					got++
				}
				if err := r.Err(); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
			if got == 0 {
				b.Fatalf("%s answered no rows over %d decisions", c.name, rows)
			}
			b.ReportMetric(float64(rows), "audit_rows")
		})
	}
}
