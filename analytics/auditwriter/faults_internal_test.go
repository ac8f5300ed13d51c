package auditwriter

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// TestAnInsertRetriedThroughANetworkFaultLandsExactlyOnce puts a TCP proxy
// (toxiproxy, in process) between the writer and the ClickHouse server and
// breaks the first attempt of every insert:
//   - the reply is dropped: the proxy forwards the whole INSERT, the server
//     commits it, and the answer never reaches the writer, which sees the
//     connection close and retries;
//   - the connection is cut mid-insert: the proxy forwards the first bytes
//     of the rows and closes both sides.
//
// Each table gets three batches: Kafka partition 0 in one month, the same
// offsets of partition 1, and later offsets of partition 0 in the next
// month. Every batch must be stored exactly once, in the table and in the
// roll-up its materialized view feeds: the retry's token must match the
// attempt that landed (the same token on every retry) and must differ from
// every other batch's (the Kafka partition and the month are in it).
func TestAnInsertRetriedThroughANetworkFaultLandsExactlyOnce(t *testing.T) {
	addr, db := testenv.ClickHouseDB(t)
	direct, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, direct, migrations.Options{Database: db}); err != nil {
		t.Fatal(err)
	}

	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	proxy := toxiproxy.NewProxy(srv, "clickhouse", "127.0.0.1:0", addr)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer proxy.Stop()
	viaProxy, err := clickhouse.Open(&clickhouse.Options{Addr: []string{proxy.Listen}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer viaProxy.Close()

	w, err := New(Options{Brokers: []string{"127.0.0.1:1"}, Catalog: topics.New(topics.Options{}), ClickHouse: viaProxy, Database: db,
		InsertRetries: 2, Metrics: metrics.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	w.retryPause = 10 * time.Millisecond

	faults := []struct {
		name  string
		toxic string // added just before the first attempt sends its rows
		// landed is what the failed attempt left in ClickHouse: all of
		// its rows or none.
		landed bool
	}{
		{"the reply to an insert that landed is dropped", `{"type":"timeout","stream":"downstream","attributes":{"timeout":300}}`, true},
		{"the connection is cut in the middle of the rows", `{"type":"limit_data","stream":"upstream","attributes":{"bytes":64}}`, false},
	}
	turn := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	stored := map[string]int{} // rows per table so far
	for fi, f := range faults {
		for _, tb := range w.tables {
			t.Run(fmt.Sprintf("%s: %s rows are stored once", f.name, tb.name), func(t *testing.T) {
				for _, part := range []struct {
					partition int32
					first     int64
					at        time.Time
				}{
					{0, 0, turn.Add(-time.Hour)},
					{1, 0, turn.Add(-time.Hour)},
					{0, 10, turn.Add(time.Hour)},
				} {
					first := part.first + int64(100*fi) // each fault's run has offsets of its own
					b := tb.newBatch()
					for o := first; o < first+10; o++ {
						add(b, rowRecord(t, tb.name, part.partition, o, part.at))
					}
					var mu sync.Mutex
					attempts, before, after := 0, countOf(t, direct, "SELECT count() FROM `"+db+"`.`"+tb.name+"`"), -1
					w.beforeSend = func(string) {
						mu.Lock()
						defer mu.Unlock()
						if attempts == 0 {
							if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(strings.Replace(f.toxic, "{", `{"name":"fault",`, 1))); err != nil {
								t.Errorf("add toxic: %v", err)
							}
						}
					}
					w.insertBatch = func(ctx context.Context, table string, b batch, tok string) error {
						err := w.insert(ctx, table, b, tok)
						mu.Lock()
						defer mu.Unlock()
						attempts++
						if attempts == 1 {
							_ = proxy.Toxics.RemoveToxic(ctx, "fault")
							if err == nil {
								t.Errorf("the first attempt succeeded through the fault")
							}
							// What the failed attempt left, once the
							// server has finished with it.
							waitFor(t, "the failed insert to end on the server", func() bool {
								return countOf(t, direct, "SELECT count() FROM system.processes WHERE startsWith(query_id, '"+w.queryIDPrefix()+"')") == 0
							})
							after = countOf(t, direct, "SELECT count() FROM `"+db+"`.`"+tb.name+"`")
						}
						return err
					}
					if err := w.flush(ctx, tb, b); err != nil {
						t.Fatal(err)
					}
					if attempts != 2 {
						t.Errorf("%d attempts, want the failed one and one retry", attempts)
					}
					if landed := after - before; landed != 0 && !f.landed || landed != 10 && f.landed {
						t.Errorf("the failed attempt left %d rows of 10; want all: %v", landed, f.landed)
					}
					stored[tb.name] += 10
				}
				q := "`" + db + "`.`" + tb.name + "`"
				if n := countOf(t, direct, "SELECT count() FROM "+q); n != stored[tb.name] {
					t.Errorf("%d rows, want %d", n, stored[tb.name])
				}
				if n := countOf(t, direct, "SELECT uniqExact(kafka_partition, kafka_offset) FROM "+q); n != stored[tb.name] {
					t.Errorf("%d distinct positions, want %d", n, stored[tb.name])
				}
				if r := rollup(db, tb.name); r != "" {
					if n := countOf(t, direct, r); n != stored[tb.name] {
						t.Errorf("the roll-up counted %d rows, want %d", n, stored[tb.name])
					}
				}
			})
		}
	}
}

// rollup counts what the roll-up of a table holds ("" for a table
// without one: receipts).
func rollup(db, table string) string {
	return map[string]string{
		"requests":  "SELECT sum(requests) FROM `" + db + "`.requests_hourly",
		"decisions": "SELECT sum(decisions) FROM `" + db + "`.decisions_hourly",
		"attempts":  "SELECT sum(attempts) FROM `" + db + "`.attempts_hourly",
		"outcomes":  "SELECT sum(deliveries) FROM `" + db + "`.outcomes_hourly",
	}[table]
}

// rowRecord is a record of the table's topic at a position, whose row time
// is at.
func rowRecord(t *testing.T, table string, partition int32, offset int64, at time.Time) *kgo.Record {
	t.Helper()
	ms := at.UnixMilli()
	id := fmt.Sprintf("%s-%d-%d", table, partition, offset)
	var v schemas.Record
	switch table {
	case "requests":
		v = &schemas.Request{RequestID: id, Tenant: "acme", Type: "invoice.paid", Recipient: "u_1", NotificationID: id, CreatedAt: ms}
	case "decisions":
		v = &schemas.Decision{DecisionID: id, Stage: "dedupe", Outcome: schemas.DecisionAccepted, Tenant: "acme", Type: "invoice.paid",
			Recipient: "u_1", NotificationID: id, At: ms}
	case "attempts":
		v = &schemas.Attempt{AttemptID: id, DeliveryID: id, NotificationID: id, Tenant: "acme", Type: "invoice.paid", Recipient: "u_1",
			Channel: "apns", Attempt: 1, Result: schemas.AttemptSent, At: ms}
	case "outcomes":
		v = &schemas.Outcome{DeliveryID: id, NotificationID: id, Tenant: "acme", Type: "invoice.paid", Recipient: "u_1", Channel: "apns",
			Status: schemas.OutcomeDelivered, Attempts: 1, At: ms}
	case "receipts":
		v = &schemas.Receipt{ReceiptID: id, Kind: "displayed", DeliveryID: id, NotificationID: id, Tenant: "acme", Type: "invoice.paid",
			Recipient: "u_1", DeviceID: "d_1", Channel: "webpush", At: ms}
	case "feed_items":
		v = &schemas.FeedItem{Tenant: "acme", Recipient: "u_1", NotificationID: id, Type: "invoice.paid", Title: "t", Body: "b",
			CreatedAt: ms, DeliveredAt: ms}
	default:
		t.Fatalf("no table %s", table)
	}
	b, err := schemas.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: "herald." + table, Partition: partition, Offset: offset, Value: b, Timestamp: at}
}
