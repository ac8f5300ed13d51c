package auditwriter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/topics"
)

// TestTheLastInsertSentAgainFillsTheRollUpsThatLackItAndOnlyThose puts a
// table in the state a ClickHouse server killed during an INSERT can leave
// (ClickHouse#104661): the table holds the insert's rows and some of its
// roll-ups lack them. The state is made on the real server by detaching
// those roll-ups' materialized views for that one insert. The writer's
// session start (resendLastInsert) must then make every roll-up count
// every row exactly once — the ones that lacked the insert get it, the
// ones that had it (dedupe_hourly, fed by decisions like decisions_hourly)
// do not count it twice — and the table must not hold a row twice
// (physical count, merges stopped). Sending again a second time, and after
// a later insert, must change nothing. The records are on a real broker,
// from which the insert is read again; the insert spans three Kafka
// partitions and has more rows than one read block of ClickHouse (65 409).
func TestTheLastInsertSentAgainFillsTheRollUpsThatLackItAndOnlyThose(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.CatalogWith(t, brokers, topics.Options{Partitions: 3})
	addr, db := testenv.ClickHouseDB(t)
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, conn, migrations.Options{Database: db}); err != nil {
		t.Fatal(err)
	}
	w, err := New(Options{Brokers: brokers, Catalog: cat, ClickHouse: conn, Database: db, Metrics: metrics.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	kafka := testenv.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	exec := func(q string) {
		t.Helper()
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	at := time.Now().UTC().Add(-2 * time.Hour)
	cases := []struct {
		table string
		// lost are the materialized views whose parts the crash lost;
		// rollups every roll-up query of the table and the rows it counts
		// (the table's count() with its view's filter).
		lost    []string
		rollups map[string]string
	}{
		{"decisions", []string{"decisions_hourly_mv"}, map[string]string{
			"SELECT sum(decisions) FROM `" + db + "`.decisions_hourly": "SELECT count() FROM `" + db + "`.decisions",
			"SELECT sum(decisions) FROM `" + db + "`.dedupe_hourly":    "SELECT count() FROM `" + db + "`.decisions WHERE stage = 'dedupe'",
		}},
		{"requests", []string{"requests_hourly_mv"}, map[string]string{rollup(db, "requests"): "SELECT count() FROM `" + db + "`.requests"}},
		{"attempts", []string{"attempts_hourly_mv"}, map[string]string{rollup(db, "attempts"): "SELECT count() FROM `" + db + "`.attempts"}},
		{"outcomes", []string{"outcomes_hourly_mv"}, map[string]string{rollup(db, "outcomes"): "SELECT count() FROM `" + db + "`.outcomes"}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("the %s roll-ups count every row once after the last insert is sent again", c.table), func(t *testing.T) {
			tb := w.tables[0]
			for _, x := range w.tables {
				if x.name == c.table {
					tb = x
				}
			}
			exec("SYSTEM STOP MERGES `" + db + "`.`" + c.table + "`")
			// On the topic: offsets 0-24 009 of partitions 0, 1 and 2,
			// then 24 010-24 014 of 0.
			produced := map[int32][]*kgo.Record{}
			produce := func(first, n int64, partitions ...int32) {
				t.Helper()
				var recs []*kgo.Record
				for _, p := range partitions {
					for o := first; o < first+n; o++ {
						r := rowRecord(t, c.table, p, o, at)
						r.Topic, r.Timestamp = tb.topic, time.Now()
						recs = append(recs, r)
					}
				}
				if err := kafka.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					produced[r.Partition] = append(produced[r.Partition], r)
				}
			}
			produce(0, 24_010, 0, 1, 2)
			produce(24_010, 5, 0)
			insert := func(first, n int64, partitions ...int32) {
				t.Helper()
				b := tb.newBatch()
				for _, p := range partitions {
					for _, r := range produced[p] {
						if r.Offset >= first && r.Offset < first+n {
							add(b, r)
						}
					}
				}
				if err := w.flush(ctx, tb, b); err != nil {
					t.Fatal(err)
				}
			}
			exact := func(when string) {
				t.Helper()
				rows := countOf(t, conn, "SELECT count() FROM `"+db+"`.`"+c.table+"`")
				if d := countOf(t, conn, "SELECT uniqExact(kafka_partition, kafka_offset) FROM `"+db+"`.`"+c.table+"`"); d != rows {
					t.Errorf("%s: the table holds %d rows of %d positions: a row was inserted twice", when, rows, d)
				}
				for r, want := range c.rollups {
					if got, n := countOf(t, conn, r), countOf(t, conn, want); got != n {
						t.Errorf("%s: %s = %d, the table %d", when, r, got, n)
					}
				}
			}

			insert(0, 10, 0, 1, 2)
			for _, mv := range c.lost {
				exec("DETACH TABLE `" + db + "`.`" + mv + "`")
			}
			insert(10, 24_000, 0, 1, 2) // the insert the server died in: 72 000 rows
			for _, mv := range c.lost {
				exec("ATTACH TABLE `" + db + "`.`" + mv + "`")
			}
			short := false
			for r, want := range c.rollups {
				if countOf(t, conn, r) < countOf(t, conn, want) {
					short = true
				}
			}
			if !short {
				t.Fatal("no roll-up lacks the insert: the crash state was not made")
			}

			for i := 1; i <= 2; i++ {
				if err := w.resendLastInsert(ctx, tb); err != nil {
					t.Fatal(err)
				}
				exact(fmt.Sprintf("after sending the last insert again %d time(s)", i))
			}
			insert(24_010, 5, 0)
			if err := w.resendLastInsert(ctx, tb); err != nil {
				t.Fatal(err)
			}
			exact("after a later insert, sent again")
			if n := countOf(t, conn, "SELECT count() FROM `"+db+"`.`"+c.table+"`"); n != 30+72_000+5 {
				t.Errorf("the table holds %d rows, want %d", n, 30+72_000+5)
			}
		})
	}
	t.Run("a table with no row written with a token is left alone", func(t *testing.T) {
		for _, tb := range w.tables {
			if tb.name == "receipts" {
				if err := w.resendLastInsert(ctx, tb); err != nil {
					t.Fatal(err)
				}
				if n := countOf(t, conn, "SELECT count() FROM `"+db+"`.receipts"); n != 0 {
					t.Errorf("receipts holds %d rows, want none", n)
				}
			}
		}
	})
}
