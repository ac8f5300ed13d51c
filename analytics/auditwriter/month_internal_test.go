package auditwriter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// TestABatchAcrossTheTurnOfAMonthSurvivesAFailureBetweenItsParts produces
// decisions on both sides of the start of the current month (UTC) in two
// Kafka partitions, makes the ClickHouse server fail every write of one of
// the two months (a CHECK constraint that its rows violate), lets the
// writer fail and start over from ClickHouse, then removes the fault and
// checks that every record is stored exactly once, in the table and in its
// roll-up.
//
// While the fault is on, what ClickHouse holds must be, for each Kafka
// partition, a prefix of its records: the earlier month's rows on their own
// when the later month fails (an INSERT over both months fails whole, so
// this part fails without the writer's cut at the change of month), nothing
// when the earlier month fails.
func TestABatchAcrossTheTurnOfAMonthSurvivesAFailureBetweenItsParts(t *testing.T) {
	brokers := testenv.Kafka(t)
	now := time.Now().UTC()
	turn := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	earlier, later := monthOf(turn.Add(-time.Millisecond).UnixMilli()), monthOf(turn.UnixMilli())
	const perSide = 25 // records of each month in each Kafka partition
	cases := []struct {
		name   string
		fail   int32
		stored int // per Kafka partition that got through, while failing
	}{
		{"a failing later month leaves the earlier month's rows stored on their own", later, perSide},
		{"a failing earlier month holds back the later month", earlier, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cat := testenv.CatalogWith(t, brokers, topics.Options{Partitions: 2})
			addr, db := testenv.ClickHouseDB(t)
			conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx := context.Background()
			if _, err := migrations.Apply(ctx, conn, migrations.Options{Database: db}); err != nil {
				t.Fatal(err)
			}
			if err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE `%s`.decisions ADD CONSTRAINT injected_fault CHECK toYYYYMM(at) != %d", db, c.fail)); err != nil {
				t.Fatal(err)
			}
			produceAcross(t, brokers, cat.Name(topics.Decisions), turn, perSide)

			reg := metrics.NewRegistry()
			w, err := New(Options{Brokers: brokers, Catalog: cat, ClickHouse: conn, Database: db, BatchRows: 10_000,
				FlushInterval: 50 * time.Millisecond, InsertRetries: 1, Metrics: reg,
				ClientOpts: []kgo.Opt{kgo.FetchMaxWait(200 * time.Millisecond)}})
			if err != nil {
				t.Fatal(err)
			}
			w.retryPause = 10 * time.Millisecond
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- w.Run(runCtx) }()
			halt := sync.OnceValue(func() error { stop(); return <-done })
			defer func() {
				if err := halt(); err != nil {
					t.Errorf("writer: %v", err)
				}
			}()

			// Two sessions failed: the second one started over from what
			// ClickHouse held after the first.
			waitFor(t, "the writer to fail twice", func() bool { return w.errs.Value() >= 2 })
			perPartition := storedByPartition(t, conn, db)
			got := 0
			for p, offsets := range perPartition {
				if n := len(offsets); n != perSide && n != 0 || n > c.stored {
					t.Errorf("Kafka partition %d: %d rows stored while month %d fails, want %d or none", p, n, c.fail, c.stored)
				}
				for i, o := range offsets {
					if o != int64(i) {
						t.Errorf("Kafka partition %d: stored offsets %v are not a prefix of its records", p, offsets)
						break
					}
				}
				got += len(offsets)
			}
			if c.stored > 0 && got == 0 {
				t.Errorf("nothing stored while month %d fails: the earlier month's rows were held back with it", c.fail)
			}

			if err := conn.Exec(ctx, "ALTER TABLE `"+db+"`.decisions DROP CONSTRAINT injected_fault"); err != nil {
				t.Fatal(err)
			}
			want := 2 * 2 * perSide
			waitFor(t, "every record in ClickHouse", func() bool { return countOf(t, conn, "SELECT count() FROM `"+db+"`.decisions") >= want })
			if err := halt(); err != nil {
				t.Errorf("writer: %v", err)
			}
			for _, q := range []string{
				"SELECT count() FROM `" + db + "`.decisions",
				"SELECT uniqExact(kafka_partition, kafka_offset) FROM `" + db + "`.decisions",
				"SELECT sum(decisions) FROM `" + db + "`.dedupe_hourly",
			} {
				if n := countOf(t, conn, q); n != want {
					t.Errorf("%s = %d, want %d", q, n, want)
				}
			}
			for _, m := range []int32{earlier, later} {
				q := fmt.Sprintf("SELECT count() FROM `%s`.decisions WHERE toYYYYMM(at) = %d", db, m)
				if n := countOf(t, conn, q); n != want/2 {
					t.Errorf("%s = %d, want %d", q, n, want/2)
				}
			}
		})
	}
}

// produceAcross produces perSide decisions before turn and perSide after it
// to each of the two partitions of topic, in time order within each (the
// decision's time, which is the row's).
func produceAcross(t *testing.T, brokers []string, topic string, turn time.Time, perSide int) {
	t.Helper()
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := range int32(2) {
		for i := range 2 * perSide {
			at := turn.Add(time.Duration(i-perSide) * time.Second)
			d := schemas.Decision{DecisionID: fmt.Sprintf("dedupe/r/%d/%d", p, i), Stage: "dedupe", Outcome: schemas.DecisionAccepted,
				Tenant: "acme", Type: "invoice.paid", Recipient: fmt.Sprintf("u_%d", i), NotificationID: fmt.Sprintf("n%d-%d", p, i),
				At: at.UnixMilli()}
			b, err := schemas.Encode(&d)
			if err != nil {
				t.Fatal(err)
			}
			// The record time is now: a month-old one would fall to the
			// topic's retention.
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: b, Timestamp: time.Now(),
				Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(d.SchemaName())}}})
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// storedByPartition returns the offsets the decisions table holds, in
// order, per Kafka partition.
func storedByPartition(t *testing.T, conn driver.Conn, db string) map[int32][]int64 {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT kafka_partition, kafka_offset FROM `"+db+"`.decisions ORDER BY kafka_partition, kafka_offset")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int32][]int64{}
	for rows.Next() {
		var p int32
		var o int64
		if err := rows.Scan(&p, &o); err != nil {
			t.Fatal(err)
		}
		out[p] = append(out[p], o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func countOf(t *testing.T, conn driver.Conn, q string) int {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return int(n)
}

// waitFor waits until cond holds; it fails the test if that takes more than
// a minute (a generous bound on this machine, not a performance claim).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
