package auditwriter_test

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/heraldhq/herald/analytics/auditwriter"
	"github.com/heraldhq/herald/analytics/internal/fixture"
	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/testenv"
)

// BenchmarkWriter measures how fast the audit writer copies a backlog of
// 100k records (30% requests, 30% decisions, 30% attempts, 10% outcomes)
// from the real Kafka broker into the ClickHouse test server, with its
// default batch size and flush interval. Each iteration writes the whole
// backlog into a fresh database. Run with -benchtime=3x.
func BenchmarkWriter(b *testing.B) {
	brokers := testenv.Kafka(b)
	addr := testenv.ClickHouse(b)
	cat := fixture.Catalog(b, brokers)
	want := produceRun(b, brokers, cat, 1, 0, nil)
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var rows int
	for _, n := range want {
		rows += n
	}
	var elapsed time.Duration
	b.ResetTimer()
	for range b.N {
		_, db := testenv.ClickHouseDB(b)
		if _, err := migrations.Apply(context.Background(), conn, migrations.Options{Database: db}); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		began := time.Now()
		go func() {
			done <- auditwriter.Run(ctx, auditwriter.Options{Brokers: brokers, Catalog: cat, ClickHouse: conn, Database: db})
		}()
		fixture.WaitForRows(b, conn, db, want, done)
		elapsed += time.Since(began)
		cancel()
		<-done
	}
	b.ReportMetric(float64(rows*b.N)/elapsed.Seconds(), "rows/s")
}
