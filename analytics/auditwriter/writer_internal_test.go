package auditwriter

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

func decisionRecord(t *testing.T, partition int32, offset int64) *kgo.Record {
	t.Helper()
	d := schemas.Decision{DecisionID: "dedupe/requests/0/1", Stage: "dedupe", Outcome: schemas.DecisionDuplicate, Tenant: "acme",
		Type: "invoice.paid", Recipient: "u_1", NotificationID: "52f364d9288c640b306b566e509104bd", At: time.Now().UnixMilli()}
	b, err := schemas.Encode(&d)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: "herald.decisions", Partition: partition, Offset: offset, Value: b, Timestamp: time.UnixMilli(d.At)}
}

func TestEveryBatchHasOneColumnPerName(t *testing.T) {
	rec := &kgo.Record{Topic: "t", Value: []byte("not json"), Timestamp: time.UnixMilli(1)}
	cases := []struct {
		name string
		b    batch
	}{
		{"requests rows have a value for every column", newRequestsBatch()},
		{"decisions rows have a value for every column", newDecisionsBatch()},
		{"attempts rows have a value for every column", newAttemptsBatch()},
		{"outcomes rows have a value for every column", newOutcomesBatch()},
		{"receipts rows have a value for every column", newReceiptsBatch()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range 3 {
				add(c.b, rec)
			}
			names, cols := c.b.columns()
			if len(names) != len(cols) {
				t.Fatalf("%d names, %d columns", len(names), len(cols))
			}
			for i, col := range cols {
				if n := reflect.ValueOf(col).Len(); n != 3 {
					t.Errorf("column %s holds %d values after 3 rows", names[i], n)
				}
			}
			c.b.reset()
			if _, cols := c.b.columns(); reflect.ValueOf(cols[len(cols)-1]).Len() != 0 || c.b.len() != 0 {
				t.Error("reset left rows behind")
			}
		})
	}
}

func TestTheDeduplicationTokenDependsOnlyOnTableMonthAndPositions(t *testing.T) {
	nov, dec := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	mk := func(partition int32, at time.Time, offsets ...int64) batch {
		b := newDecisionsBatch()
		for _, o := range offsets {
			add(b, decisionAt(t, partition, o, at))
		}
		return b
	}
	cases := []struct {
		name string
		a, b batch
		ta   string
		tb   string
		same bool
	}{
		{"the same offsets give the same token", mk(0, nov, 1, 2, 3), mk(0, nov, 1, 2, 3), "decisions", "decisions", true},
		{"the same offsets at other row times of the month give the same token", mk(0, nov, 1, 2, 3), mk(0, nov.Add(time.Hour), 1, 2, 3), "decisions", "decisions", true},
		{"other offsets give another token", mk(0, nov, 1, 2, 3), mk(0, nov, 4, 5, 6), "decisions", "decisions", false},
		{"a gap in the offsets gives another token", mk(0, nov, 1, 2, 3), mk(0, nov, 1, 3), "decisions", "decisions", false},
		{"the same offsets of another Kafka partition give another token", mk(0, nov, 1, 2, 3), mk(1, nov, 1, 2, 3), "decisions", "decisions", false},
		{"the same offsets in another month give another token", mk(0, nov, 1, 2, 3), mk(0, dec, 1, 2, 3), "decisions", "decisions", false},
		{"another table gives another token", mk(0, nov, 1, 2, 3), mk(0, nov, 1, 2, 3), "decisions", "requests", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := token(c.ta, c.a) == token(c.tb, c.b); got != c.same {
				t.Fatalf("tokens equal = %v, want %v", got, c.same)
			}
		})
	}
}

// TestARetriedInsertIsDroppedByItsToken checks on the ClickHouse server what
// the writer's retries rely on: a block inserted again with the same
// insert_deduplication_token is dropped, by the table and by the roll-ups
// its materialized views feed.
func TestARetriedInsertIsDroppedByItsToken(t *testing.T) {
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
	w, err := New(Options{Brokers: []string{"127.0.0.1:1"}, Catalog: topics.New(topics.Options{}), ClickHouse: conn, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	tb := w.byName["herald.decisions"]
	counts := func(t *testing.T) (rows, rolled uint64) {
		t.Helper()
		if err := conn.QueryRow(ctx, "SELECT count() FROM `"+db+"`.decisions").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "SELECT sum(decisions) FROM `"+db+"`.dedupe_hourly").Scan(&rolled); err != nil {
			t.Fatal(err)
		}
		return rows, rolled
	}
	steps := []struct {
		name    string
		offsets []int64
		retries int
		want    uint64
	}{
		{"a first insert is written", []int64{10, 11}, 0, 2},
		{"the same batch inserted three more times is dropped", []int64{10, 11}, 3, 2},
		{"a batch with other offsets is written", []int64{12, 13, 14}, 1, 5},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			b := tb.newBatch()
			for _, o := range s.offsets {
				add(b, decisionRecord(t, 0, o))
			}
			tok := token(tb.name, b)
			for range s.retries + 1 {
				if err := w.insert(ctx, tb.name, b, tok); err != nil {
					t.Fatal(err)
				}
			}
			if rows, rolled := counts(t); rows != s.want || rolled != s.want {
				t.Fatalf("table rows %d, roll-up decisions %d; want %d", rows, rolled, s.want)
			}
		})
	}
}

// TestAStopWhileTheSchemaIsCheckedIsNotAnError: a writer stopped (SIGINT,
// SIGTERM) before it has checked the schema ends cleanly, as one stopped
// later does; a schema it cannot check is still an error. ClickHouse is
// an address nobody listens on: no server is needed.
func TestAStopWhileTheSchemaIsCheckedIsNotAnError(t *testing.T) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w, err := New(Options{Brokers: []string{"127.0.0.1:1"}, Catalog: topics.New(topics.Options{}), ClickHouse: conn, Database: "herald"})
	if err != nil {
		t.Fatal(err)
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		wantErr bool
	}{
		{"a writer stopped before it could reach ClickHouse returns no error", stopped, false},
		{"a writer that cannot reach ClickHouse to check the schema returns the error", context.Background(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := w.Run(tc.ctx)
			if (err != nil) != tc.wantErr || (err != nil && !strings.Contains(err.Error(), "check schema")) {
				t.Fatalf("Run: %v, want an error %v", err, tc.wantErr)
			}
		})
	}
}
