package auditwriter_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/internal/fixture"
	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// killRecords is the size of the run the issue asks for.
const killRecords = 100_000

// TestSIGKILLDuringARunLosesAndRepeatsNothing runs `herald audit-writer` as a
// child process while 100k records are produced, kills it with SIGKILL at
// random moments, restarts it, and checks that ClickHouse ends with every
// record exactly once, in the tables and in the roll-ups their materialized
// views feed.
//
// The run uses a chDB ClickHouse server of its own (`herald clickhouse-server`
// on free ports), not the shared test server: chDB 26.7 sometimes aborts when
// a client is killed in the middle of an INSERT ("Terminate called for
// uncaught exception: Connection reset by peer" in TCPHandler), which would
// take the shared server down under the other tests. If the private server
// dies that way, the test restarts it on the same data and goes on; the
// writer rides it out by starting over.
//
// Counts are checked three ways: physical rows (count()), distinct Kafka
// positions, and FINAL. The tables are ReplacingMergeTree on the position,
// whose merges would hide a duplicate, so merges are stopped on them for the
// run: the physical count, and the roll-ups (which a duplicate insert would
// inflate for good), prove that the writer never inserted a record twice.
func TestSIGKILLDuringARunLosesAndRepeatsNothing(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := fixture.Catalog(t, brokers)
	bin := buildHerald(t)
	ch := startClickHouse(t, bin)
	addr, db := ch.addr, "herald_kill"
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := migrations.Apply(context.Background(), conn, migrations.Options{Database: db}); err != nil {
		t.Fatal(err)
	}
	stopMerges := func(conn driver.Conn) error {
		for _, table := range []string{"requests", "decisions", "attempts", "outcomes"} {
			if err := conn.Exec(context.Background(), "SYSTEM STOP MERGES `"+db+"`.`"+table+"`"); err != nil {
				return err
			}
		}
		return nil
	}
	if err := stopMerges(conn); err != nil {
		t.Fatal(err)
	}
	again := func(conn driver.Conn) {
		if err := stopMerges(conn); err != nil {
			t.Logf("stop merges after a restart: %v", err)
		}
	}
	ch.afterRestart.Store(&again)

	seed := rand.Uint64()
	t.Logf("random seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	produced := make(chan map[string]int, 1)
	produceSeed := rng.Uint64()
	go func() { produced <- produceRun(t, brokers, cat, produceSeed, 30*time.Millisecond) }()

	logs := filepath.Join(t.TempDir(), "audit-writer.log")
	logf, err := os.Create(logs)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "audit-writer")
		cmd.Env = append(os.Environ(),
			"HERALD_BROKERS="+brokers[0],
			"HERALD_TOPIC_PREFIX="+cat.Options().Prefix,
			"HERALD_CLICKHOUSE_ADDR="+addr,
			"HERALD_DATABASE="+db,
			"HERALD_BATCH_ROWS=5000",
			"HERALD_FLUSH_INTERVAL=100ms",
			"HERALD_LOG_LEVEL=info",
		)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	defer func() {
		if t.Failed() || os.Getenv("HERALD_TEST_SHOW_LOG") != "" {
			b, _ := os.ReadFile(logs)
			t.Logf("audit writer log (last 4 KiB):\n%s", tail(b, 4096))
			if p := os.Getenv("HERALD_TEST_SHOW_LOG"); p != "" && p != "1" {
				os.WriteFile(p, b, 0o644)
			}
		}
	}()

	const kills = 6
	for i := range kills {
		cmd := start()
		time.Sleep(time.Duration(300+rng.IntN(900)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		_ = cmd.Wait()
		t.Logf("kill %d: %d rows in ClickHouse", i+1, totalRows(conn, db))
	}
	want := <-produced
	if want == nil {
		t.Fatal("producing the run failed")
	}
	rowsBefore := max(totalRows(conn, db), 0)
	cmd := start()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	began := time.Now()
	fixture.WaitForRows(t, conn, db, want, done)
	el := time.Since(began)
	t.Logf("the last run wrote %d rows in %s (%.0f rows/s, including start-up)", killRecords-rowsBefore, el.Round(time.Millisecond),
		float64(killRecords-rowsBefore)/el.Seconds())
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("audit writer did not stop cleanly on SIGINT: %v", err)
	}

	if n := ch.crashes.Load(); n > 0 {
		t.Logf("the private ClickHouse server crashed %d time(s) during the run and was restarted", n)
	}
	ctx := context.Background()
	count := func(t *testing.T, q string) int {
		t.Helper()
		var n uint64
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return int(n)
	}
	total := 0
	for table, n := range want {
		total += n
		t.Run(fmt.Sprintf("the %s table holds each of its %d records exactly once", table, n), func(t *testing.T) {
			q := "`" + db + "`.`" + table + "`"
			physical := count(t, "SELECT count() FROM "+q)
			distinct := count(t, "SELECT uniqExact(kafka_topic, kafka_partition, kafka_offset) FROM "+q)
			final := count(t, "SELECT count() FROM "+q+" FINAL")
			aborted := count(t, "SELECT count() FROM "+q+" WHERE type = 'aborted'")
			if physical != n || distinct != n || final != n || aborted != 0 {
				t.Fatalf("rows %d, distinct positions %d, FINAL %d, aborted %d; want %d, %d, %d, 0", physical, distinct, final, aborted, n, n, n)
			}
		})
	}
	if total != killRecords {
		t.Fatalf("produced %d records, want %d", total, killRecords)
	}
	t.Run("the roll-ups counted every record exactly once", func(t *testing.T) {
		cases := []struct{ rollup, raw string }{
			{"SELECT sum(requests) FROM `" + db + "`.requests_hourly", "SELECT count() FROM `" + db + "`.requests WHERE decode_error = ''"},
			{"SELECT sum(decisions) FROM `" + db + "`.dedupe_hourly", "SELECT count() FROM `" + db + "`.decisions WHERE decode_error = '' AND stage = 'dedupe'"},
			{"SELECT sum(attempts) FROM `" + db + "`.attempts_hourly", "SELECT count() FROM `" + db + "`.attempts WHERE decode_error = ''"},
			{"SELECT sum(deliveries) FROM `" + db + "`.outcomes_hourly", "SELECT count() FROM `" + db + "`.outcomes WHERE decode_error = ''"},
		}
		for _, c := range cases {
			if r, n := count(t, c.rollup), count(t, c.raw); r != n || n == 0 {
				t.Errorf("%s = %d, but %s = %d", c.rollup, r, c.raw, n)
			}
		}
	})
}

// privateClickHouse is a chDB server run by the test.
type privateClickHouse struct {
	addr    string
	crashes atomic.Int32
	// afterRestart, if set, runs once the server answers again after a
	// crash (settings such as stopped merges do not survive a restart).
	afterRestart atomic.Pointer[func(driver.Conn)]
}

// ping waits until the server answers, at most limit.
func (ch *privateClickHouse) ping(limit time.Duration) (driver.Conn, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ch.addr}, DialTimeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := conn.Ping(ctx)
		cancel()
		if err == nil {
			return conn, nil
		}
		if time.Now().After(deadline) {
			conn.Close()
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startClickHouse runs `herald clickhouse-server` on free loopback ports
// with a fresh data directory, restarts it if it dies before the test ends,
// and stops it (SIGTERM) when the test ends.
func startClickHouse(t *testing.T, bin string) *privateClickHouse {
	t.Helper()
	tcp, http := testenv.FreePort(t), testenv.FreePort(t)
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "server.out"))
	if err != nil {
		t.Fatal(err)
	}
	ch := &privateClickHouse{addr: fmt.Sprintf("127.0.0.1:%d", tcp)}
	var mu sync.Mutex
	var cmd *exec.Cmd
	var exited chan struct{}
	stopping := false
	var run func()
	run = func() {
		c := exec.Command(bin, "clickhouse-server", "--path", filepath.Join(dir, "data"),
			"--tcp-port", fmt.Sprint(tcp), "--http-port", fmt.Sprint(http))
		c.Stdout, c.Stderr = out, out
		if err := c.Start(); err != nil {
			t.Errorf("start clickhouse-server: %v", err)
			return
		}
		done := make(chan struct{})
		mu.Lock()
		cmd, exited = c, done
		mu.Unlock()
		go func() {
			err := c.Wait()
			close(done)
			mu.Lock()
			again := !stopping
			mu.Unlock()
			if again {
				ch.crashes.Add(1)
				t.Logf("private ClickHouse server exited (%v); restarting it", err)
				time.Sleep(time.Second) // let the ports close
				run()
				if f := ch.afterRestart.Load(); f != nil {
					if conn, err := ch.ping(90 * time.Second); err == nil {
						(*f)(conn)
						conn.Close()
					}
				}
			}
		}()
	}
	run()
	t.Cleanup(func() {
		mu.Lock()
		stopping = true
		c, done := cmd, exited
		mu.Unlock()
		_ = c.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
		out.Close()
	})
	conn, err := ch.ping(90 * time.Second)
	if err != nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("private ClickHouse server does not answer: %v\n%s", err, tail(b, 4096))
	}
	conn.Close()
	return ch
}

// totalRows counts the rows of the four tables; -1 while the server is down.
func totalRows(conn driver.Conn, db string) int {
	var n uint64
	q := "SELECT (SELECT count() FROM `" + db + "`.requests) + (SELECT count() FROM `" + db + "`.decisions) + " +
		"(SELECT count() FROM `" + db + "`.attempts) + (SELECT count() FROM `" + db + "`.outcomes)"
	if err := conn.QueryRow(context.Background(), q).Scan(&n); err != nil {
		return -1
	}
	return int(n)
}

// buildHerald builds the herald binary for the test.
func buildHerald(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "herald")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/heraldhq/herald/cmd/herald")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build herald: %v\n%s", err, out.String())
	}
	return bin
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// produceRun produces killRecords committed records over the four audited
// topics, in transactions of 1000 with a pause after each, with an aborted
// transaction every tenth (its records must never be written). It returns
// the committed records per table.
func produceRun(t testing.TB, brokers []string, cat *topics.Catalog, seed uint64, pause time.Duration) map[string]int {
	rng := rand.New(rand.NewPCG(seed, 7))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("kill-"+cat.Options().Prefix),
		kgo.RecordPartitioner(cat.Partitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		t.Error(err)
		return nil
	}
	defer cl.Close()
	ctx := context.Background()
	counts := map[string]int{"requests": 0, "decisions": 0, "attempts": 0, "outcomes": 0}
	now := time.Now()
	const perTxn = 1000
	for txn := 0; counts["requests"]+counts["decisions"]+counts["attempts"]+counts["outcomes"] < killRecords; txn++ {
		abort := txn%10 == 9
		recs := make([]*kgo.Record, 0, perTxn)
		for range perTxn {
			table, rec := randomRecord(t, cat, rng, now.Add(-time.Duration(rng.IntN(3600_000))*time.Millisecond), abort)
			if !abort {
				counts[table]++
			}
			recs = append(recs, rec)
		}
		if err := cl.BeginTransaction(); err != nil {
			t.Error(err)
			return nil
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Errorf("produce: %v", err)
			return nil
		}
		end := kgo.TryCommit
		if abort {
			end = kgo.TryAbort
		}
		if err := cl.EndTransaction(ctx, end); err != nil {
			t.Error(err)
			return nil
		}
		time.Sleep(pause)
	}
	return counts
}

// randomRecord returns one realistic record of a random audited topic.
func randomRecord(t testing.TB, cat *topics.Catalog, rng *rand.Rand, at time.Time, aborted bool) (string, *kgo.Record) {
	typ := []string{"invoice.paid", "chat.message", "order.shipped"}[rng.IntN(3)]
	if aborted {
		typ = "aborted"
	}
	rcp := fmt.Sprintf("u_%d", rng.IntN(5000))
	nid := identity.DedupeID("acme", typ, rcp, fmt.Sprintf("k_%d", rng.IntN(20000)))
	ms := at.UnixMilli()
	var table, topic, key string
	var v schemas.Record
	switch n := rng.IntN(10); {
	case n < 3:
		table, topic, key = "requests", cat.Name(topics.Requests), nid
		v = &schemas.Request{RequestID: identity.NewRandomID(), Tenant: "acme", Type: typ, Recipient: rcp, NotificationID: nid,
			IDSource: "dedupe_key", DedupeKey: "k", Title: "Title", Body: "Body of the notification", Locale: "en-GB",
			Channels: []string{"apns"}, Producer: "billing", Source: "sdk", CreatedAt: ms}
	case n < 6:
		table, topic, key = "decisions", cat.Name(topics.Decisions), nid
		outcome := []string{schemas.DecisionAccepted, schemas.DecisionDuplicate}[rng.IntN(2)]
		v = &schemas.Decision{DecisionID: fmt.Sprintf("dedupe/r/%d/%d", rng.IntN(3), rng.Int64N(1<<40)), Stage: "dedupe", Outcome: outcome,
			RequestID: identity.NewRandomID(), Tenant: "acme", Type: typ, Recipient: rcp, NotificationID: nid, At: ms,
			SourceTopic: cat.Name(topics.Requests), SourcePartition: int32(rng.IntN(3)), SourceOffset: rng.Int64N(1 << 40)}
	case n < 9:
		did := identity.DeliveryID(nid, "ios-"+rcp)
		table, topic, key = "attempts", cat.Name(topics.Attempts), did
		v = &schemas.Attempt{AttemptID: did + "/1", DeliveryID: did, NotificationID: nid, Tenant: "acme", Type: typ, Recipient: rcp,
			DeviceID: "ios-" + rcp, Channel: "apns", Attempt: 1 + rng.IntN(3), Result: schemas.AttemptSent, Classification: "ok",
			ProviderStatus: 200, CollapseID: nid, APNsID: identity.APNsID(nid), LatencyMs: int64(rng.IntN(200)), At: ms}
	default:
		did := identity.DeliveryID(nid, "ios-"+rcp)
		table, topic, key = "outcomes", cat.Name(topics.Outcomes), did
		v = &schemas.Outcome{DeliveryID: did, NotificationID: nid, Tenant: "acme", Type: typ, Recipient: rcp, DeviceID: "ios-" + rcp,
			Channel: "apns", Status: schemas.OutcomeDelivered, Attempts: 1, At: ms}
	}
	b, err := schemas.Encode(v)
	if err != nil {
		t.Error(err)
	}
	return table, &kgo.Record{Topic: topic, Key: []byte(key), Value: b, Timestamp: at,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(v.SchemaName())}}}
}
