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
	f := newCrashFixture(t)
	ctx := context.Background()
	db := f.db

	// The crash between the roll-up's deduplication record and its part's
	// rename, in the second insert.
	part, partPath := f.lastPart("attempts_hourly")
	f.kill()
	if err := os.Rename(partPath, filepath.Join(filepath.Dir(partPath), "tmp_insert_"+part)); err != nil {
		t.Fatal(err)
	}
	conn := f.start()
	if n, r := f.counts(conn); n != 3 || r != 1 {
		t.Fatalf("after the restart: the table holds %d rows, the roll-up counts %d; want 3 and 1 (the crash state was not made)", n, r)
	}

	w, tb := f.newWriter(conn)
	for i := 1; i <= 2; i++ {
		if err := w.resendLastInsert(ctx, tb); err != nil {
			t.Fatal(err)
		}
		if n, r := f.counts(conn); n != 3 || r != 3 {
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
	f.logServer("already exists as part " + part)
}

// TestATableWhoseDeduplicationRecordOutlivedItsPartStoresTheBatchAgain is
// the raw table's side of the same crash: the server killed between the
// table's deduplication record of an insert and its part's rename keeps
// the id without the rows (and its views never saw the block). The next
// session reads the same records from the offsets the table holds; with
// no record arrived since, it makes exactly the lost batch, with the same
// token, which the table drops as a duplicate: its rows would be lost
// below the offsets the writer resumes after. The writer must find that
// the session's first insert is not stored (storedUnder) and write it
// again under a new token; the table then holds every record once and the
// roll-up counts each once, also after a further session start (whose
// resend recognises the batch under its new token).
//
// The state is made as in
// TestARollUpWhoseDeduplicationRecordOutlivedItsPartIsRepaired: the
// table's part of the second insert turned back into its temporary
// directory (its id left in the table's deduplication log), the roll-up's
// part of it removed with its deduplication record, the server restarted.
func TestATableWhoseDeduplicationRecordOutlivedItsPartStoresTheBatchAgain(t *testing.T) {
	f := newCrashFixture(t)
	tablePart, tablePath := f.lastPart("attempts")
	rollPart, rollPath := f.lastPart("attempts_hourly")
	f.kill()
	if err := os.Rename(tablePath, filepath.Join(filepath.Dir(tablePath), "tmp_insert_"+tablePart)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(rollPath); err != nil {
		t.Fatal(err)
	}
	dropLogLine(t, filepath.Join(filepath.Dir(rollPath), "deduplication_logs"), rollPart)
	conn := f.start()
	if n, r := f.counts(conn); n != 1 || r != 1 {
		t.Fatalf("after the restart: the table holds %d rows, the roll-up counts %d; want 1 and 1 (the crash state was not made)", n, r)
	}

	for run := 1; run <= 2; run++ {
		w, _ := f.newWriter(conn)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.sessions(ctx) }()
		func() {
			defer func() { stop(); testenv.Await(t, done, "the writer to stop") }()
			waitFor(t, "the table to hold the three attempts", func() bool { n, _ := f.counts(conn); return n >= 3 })
		}()
		if n, r := f.counts(conn); n != 3 || r != 3 {
			t.Errorf("after writer run %d: the table holds %d rows, the roll-up counts %d attempts; want 3 and 3", run, n, r)
		}
		if d := countOf(t, conn, "SELECT uniqExact(kafka_partition, kafka_offset) FROM `"+f.db+"`.attempts"); d != 3 {
			t.Errorf("after writer run %d: the table holds %d positions, want 3", run, d)
		}
	}
	f.logServer("already exists as part " + tablePart)
}

// crashFixture is a chDB server of the test's own with a migrated
// database, three attempts on a topic (offsets 0, 1 and 2, with retries
// and latencies, so that every column of the roll-up is checked) and the
// writer's two inserts of them (offset 0, then 1-2), merges stopped on the
// attempts table and its roll-up.
type crashFixture struct {
	t       *testing.T
	bin     string
	opts    chdb.ServeOptions
	proc    *chdb.Process
	log     *os.File
	brokers []string
	cat     *topics.Catalog
	db      string
}

func newCrashFixture(t *testing.T) *crashFixture {
	t.Helper()
	brokers := testenv.Kafka(t)
	lib, err := chdb.FindLib()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	f := &crashFixture{t: t, bin: testenv.Herald(t), log: logFile, brokers: brokers,
		cat: testenv.CatalogWith(t, brokers, topics.Options{Partitions: 1}), db: "herald_crash",
		opts: chdb.ServeOptions{Path: filepath.Join(dir, "data"), TCPPort: testenv.FreePort(t), HTTPPort: testenv.FreePort(t),
			LibPath: lib, MaxMemoryMB: 1024, StartTimeout: 2 * time.Minute, PortWait: 30 * time.Second,
			LogLevel: "information", Stderr: logFile}}
	t.Cleanup(func() {
		if f.proc != nil {
			_ = f.proc.Stop()
		}
		logFile.Close()
	})
	conn := f.start()
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, conn, migrations.Options{Database: f.db}); err != nil {
		t.Fatal(err)
	}
	w, tb := f.newWriter(conn)
	kafka := testenv.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	at := time.Now().UTC().Add(-2 * time.Hour)
	var recs []*kgo.Record
	for o := int64(0); o < 3; o++ {
		id := fmt.Sprintf("attempt-%d", o)
		v, err := schemas.Encode(&schemas.Attempt{AttemptID: id, DeliveryID: id, NotificationID: id, Tenant: "acme", Type: "invoice.paid",
			Recipient: "u_1", Channel: "apns", Attempt: int(o) + 1, Result: schemas.AttemptSent, LatencyMs: 10 * (o + 1), At: at.UnixMilli()})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: tb.topic, Partition: 0, Value: v, Timestamp: time.Now()})
	}
	if err := kafka.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"attempts", "attempts_hourly"} {
		if err := conn.Exec(ctx, "SYSTEM STOP MERGES `"+f.db+"`."+table); err != nil {
			t.Fatal(err)
		}
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
	if n, r := f.counts(conn); n != 3 || r != 3 {
		t.Fatalf("before the crash: the table holds %d rows, the roll-up counts %d; want 3 and 3", n, r)
	}
	return f
}

// start starts the server (again, on the same ports and data) and opens a
// connection to it.
func (f *crashFixture) start() driver.Conn {
	f.t.Helper()
	p, err := chdb.Spawn(context.Background(), f.bin, f.opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.proc = p
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{p.TCPAddr()}, DialTimeout: 10 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	return conn
}

// kill SIGKILLs the server and waits until it is gone.
func (f *crashFixture) kill() {
	f.t.Helper()
	if err := syscall.Kill(f.proc.Pid(), syscall.SIGKILL); err != nil {
		f.t.Fatal(err)
	}
	<-f.proc.Exited()
}

// newWriter is a writer on conn and its attempts table.
func (f *crashFixture) newWriter(conn driver.Conn) (*Writer, *table) {
	f.t.Helper()
	w, err := New(Options{Brokers: f.brokers, Catalog: f.cat, ClickHouse: conn, Database: f.db, Metrics: metrics.NewRegistry()})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, tb := range w.tables {
		if tb.name == "attempts" {
			return w, tb
		}
	}
	f.t.Fatal("no attempts table")
	return nil, nil
}

// counts are the rows of the attempts table and the attempts its roll-up
// counts.
func (f *crashFixture) counts(conn driver.Conn) (rows, rolled int) {
	return countOf(f.t, conn, "SELECT count() FROM `"+f.db+"`.attempts"), countOf(f.t, conn, "SELECT sum(attempts) FROM `"+f.db+"`.attempts_hourly")
}

// lastPart is the name and directory of the table's part with the highest
// block number (the second insert's), which its deduplication log names.
func (f *crashFixture) lastPart(table string) (name, dir string) {
	f.t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{f.proc.TCPAddr()}, DialTimeout: 10 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.QueryRow(context.Background(), "SELECT name, path FROM system.parts WHERE database = ? AND table = ? AND active "+
		"ORDER BY max_block_number DESC LIMIT 1", f.db, table).Scan(&name, &dir); err != nil {
		f.t.Fatal(err)
	}
	dir = filepath.Clean(dir)
	if log := readAll(f.t, filepath.Join(filepath.Dir(dir), "deduplication_logs")); !strings.Contains(log, name) {
		f.t.Fatalf("the deduplication log of %s does not name part %s:\n%s", table, name, log)
	}
	return name, dir
}

// logServer logs the server's lines that contain s (the server saying
// why it dropped a block).
func (f *crashFixture) logServer(s string) {
	b, _ := os.ReadFile(f.log.Name())
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, s) {
			f.t.Logf("server: %s", line)
		}
	}
}

// dropLogLine removes from the deduplication logs in dir the lines that
// name part: the record a block never written would not have left.
func dropLogLine(t *testing.T, dir, part string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for line := range strings.SplitSeq(string(b), "\n") {
			if !strings.Contains(line, "\t"+part+"\t") {
				kept = append(kept, line)
			}
		}
		if err := os.WriteFile(p, []byte(strings.Join(kept, "\n")), 0o644); err != nil {
			t.Fatal(err)
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
