package auditwriter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/chdb"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// TestARollUpWhoseDeduplicationRecordOutlivedItsPartIsRepaired is the
// regression test of the attempts_hourly shortfall that the outage test
// saw once (300 of 301) with the resend of the last insert in place.
//
// A MergeTree table with non_replicated_deduplication_window commits an
// inserted part in two steps (MergeTreeSink::commitPart): it first appends
// the block's id to its deduplication log (deduplication_logs/, a write(2)
// that survives a SIGKILL of the server), then renames the temporary part
// (tmp_insert_…) into place. A server killed between the two leaves the
// block's id in the log and no part; on restart the temporary directory is
// not loaded. A roll-up (attempts_hourly, filled by attempts_hourly_mv) in
// that state lacks the insert's aggregate, and the resend, the same INSERT
// with the same token, is dropped by the roll-up as a duplicate of the
// part it never committed (the server logs "Block with ID … already exists
// as part …; ignoring it" for the roll-up). The session start must still
// leave the roll-up exact: it compares each roll-up with the table over
// the hours of the last insert and inserts what it lacks (repairRollUps).
// Before that repair the roll-up stayed short by the insert's rows.
//
// The test makes that state on a chDB server of its own, exactly as the
// kill leaves it: after two inserts (the second of two rows) it SIGKILLs
// the server, turns the roll-up part of the second insert back into the
// temporary directory it was before its rename (its id stays in the
// roll-up's deduplication log), and starts the server again. The table
// holds every row; the roll-up lacks the second insert's two; after the
// writer's session start it counts every row once, and after a second
// session start still once.
func TestARollUpWhoseDeduplicationRecordOutlivedItsPartIsRepaired(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.CatalogWith(t, brokers, topics.Options{Partitions: 1})
	bin := testenv.Herald(t)
	lib, err := chdb.FindLib()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	opts := chdb.ServeOptions{Path: filepath.Join(dir, "data"), TCPPort: testenv.FreePort(t), HTTPPort: testenv.FreePort(t),
		LibPath: lib, MaxMemoryMB: 1024, StartTimeout: 2 * time.Minute, PortWait: 30 * time.Second,
		LogLevel: "information", Stderr: logFile}
	var proc *chdb.Process
	start := func() driver.Conn {
		t.Helper()
		p, err := chdb.Spawn(context.Background(), bin, opts)
		if err != nil {
			t.Fatal(err)
		}
		proc = p
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{p.TCPAddr()}, DialTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	t.Cleanup(func() {
		if proc != nil {
			_ = proc.Stop()
		}
	})
	conn := start()
	ctx := context.Background()
	const db = "herald_phantom"
	if _, err := migrations.Apply(ctx, conn, migrations.Options{Database: db}); err != nil {
		t.Fatal(err)
	}
	newWriter := func(conn driver.Conn) (*Writer, *table) {
		t.Helper()
		w, err := New(Options{Brokers: brokers, Catalog: cat, ClickHouse: conn, Database: db, Metrics: metrics.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range w.tables {
			if tb.name == "attempts" {
				return w, tb
			}
		}
		t.Fatal("no attempts table")
		return nil, nil
	}
	w, tb := newWriter(conn)

	// Three attempts on the topic (offsets 0, 1, 2); the writer inserts
	// offset 0, then 1-2, as two INSERTs with their tokens.
	kafka := testenv.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	at := time.Now().UTC().Add(-2 * time.Hour)
	var recs []*kgo.Record
	for o := int64(0); o < 3; o++ {
		id := fmt.Sprintf("attempt-%d", o)
		// Retries and latencies, so that every column of the roll-up is
		// checked, not only the count.
		v, err := schemas.Encode(&schemas.Attempt{AttemptID: id, DeliveryID: id, NotificationID: id, Tenant: "acme", Type: "invoice.paid",
			Recipient: "u_1", Channel: "apns", Attempt: int(o) + 1, Result: schemas.AttemptSent, LatencyMs: 10 * (o + 1), At: at.UnixMilli()})
		if err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Topic: tb.topic, Partition: 0, Value: v, Timestamp: time.Now()}
		recs = append(recs, r)
	}
	if err := kafka.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "SYSTEM STOP MERGES `"+db+"`.attempts_hourly"); err != nil {
		t.Fatal(err)
	}
	for _, span := range [][2]int{{0, 1}, {1, 3}} {
		b := tb.newBatch()
		for _, r := range recs[span[0]:span[1]] {
			add(b, r)
		}
		if err := w.flush(ctx, tb, b); err != nil {
			t.Fatal(err)
		}
	}
	table := "SELECT count() FROM `" + db + "`.attempts"
	rolled := "SELECT sum(attempts) FROM `" + db + "`.attempts_hourly"
	if n, r := countOf(t, conn, table), countOf(t, conn, rolled); n != 3 || r != 3 {
		t.Fatalf("before the crash: the table holds %d rows, the roll-up counts %d; want 3 and 3", n, r)
	}

	// The roll-up part of the second insert: its highest block number.
	var part, partPath string
	if err := conn.QueryRow(ctx, "SELECT name, path FROM system.parts WHERE database = ? AND table = 'attempts_hourly' AND active "+
		"ORDER BY max_block_number DESC LIMIT 1", db).Scan(&part, &partPath); err != nil {
		t.Fatal(err)
	}
	dedupLog := readAll(t, filepath.Join(filepath.Dir(filepath.Clean(partPath)), "deduplication_logs"))
	if !strings.Contains(dedupLog, part) {
		t.Fatalf("the roll-up's deduplication log does not name part %s:\n%s", part, dedupLog)
	}

	// The crash between the roll-up's deduplication record and its part's
	// rename.
	if err := syscall.Kill(proc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-proc.Exited()
	if err := os.Rename(filepath.Clean(partPath), filepath.Join(filepath.Dir(filepath.Clean(partPath)), "tmp_insert_"+part)); err != nil {
		t.Fatal(err)
	}
	conn = start()
	if n, r := countOf(t, conn, table), countOf(t, conn, rolled); n != 3 || r != 1 {
		t.Fatalf("after the restart: the table holds %d rows, the roll-up counts %d; want 3 and 1 (the crash state was not made)", n, r)
	}

	w, tb = newWriter(conn)
	for i := 1; i <= 2; i++ {
		if err := w.resendLastInsert(ctx, tb); err != nil {
			t.Fatal(err)
		}
		if n, r := countOf(t, conn, table), countOf(t, conn, rolled); n != 3 || r != 3 {
			t.Errorf("after session start %d: the table holds %d rows, the roll-up counts %d attempts; want 3 and 3", i, n, r)
		}
	}
	// Every column of the roll-up, not only the count, as the view makes
	// it from the table.
	for rollUpQuery, tableQuery := range map[string]string{
		"SELECT sum(retries) FROM `" + db + "`.attempts_hourly":                                                   "SELECT countIf(attempt > 1) FROM `" + db + "`.attempts",
		"SELECT sum(latency_ms_sum) FROM `" + db + "`.attempts_hourly":                                            "SELECT sum(toUInt64(greatest(latency_ms, 0))) FROM `" + db + "`.attempts",
		"SELECT uniqExact(tenant, type, channel, result, classification, hour) FROM `" + db + "`.attempts_hourly": "SELECT uniqExact(tenant, type, channel, result, classification, toStartOfHour(at)) FROM `" + db + "`.attempts",
	} {
		if got, want := countOf(t, conn, rollUpQuery), countOf(t, conn, tableQuery); got != want {
			t.Errorf("%s = %d; from the table %d", rollUpQuery, got, want)
		}
	}
	// The server says why: the roll-up dropped the block as a duplicate of
	// the part it never committed.
	b, _ := os.ReadFile(logFile.Name())
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, "already exists as part "+part) {
			t.Logf("server: %s", line)
		}
	}
}

// readAll returns the contents of every file in dir, one after the other.
func readAll(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sb.Write(b)
	}
	return sb.String()
}

// TestEveryRollUpOfAMigratedDatabaseIsRepaired checks rollUpsOf against a
// migrated database: every materialized view of every audit table is
// there, with the roll-up table it fills, so that repairRollUps compares
// every roll-up.
func TestEveryRollUpOfAMigratedDatabaseIsRepaired(t *testing.T) {
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
	for _, at := range auditTables {
		var views []string
		if err := conn.QueryRow(ctx, "SELECT arraySort(dependencies_table) FROM system.tables WHERE database = ? AND name = ?", db, at.name).Scan(&views); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, r := range rollUpsOf[at.name] {
			want = append(want, r.view)
			var create string
			if err := conn.QueryRow(ctx, "SELECT create_table_query FROM system.tables WHERE database = ? AND name = ?", db, r.view).Scan(&create); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(create, " TO "+db+"."+r.target+" ") {
				t.Errorf("the view %s does not fill %s: %s", r.view, r.target, create)
			}
		}
		sort.Strings(want)
		if strings.Join(views, ",") != strings.Join(want, ",") {
			t.Errorf("%s feeds the views %v; rollUpsOf names %v", at.name, views, want)
		}
	}
}
