package auditwriter_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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

// killRecords is the least size of the run the issue asks for; kills is
// how often the writer is killed during it.
const (
	killRecords = 100_000
	kills       = 24
)

// TestSIGKILLDuringARunLosesAndRepeatsNothing runs `herald audit-writer` as a
// child process while at least 100k records are produced, kills it with
// SIGKILL 24 times, restarts it, and checks that ClickHouse ends with every
// record exactly once, in the tables and in the roll-ups their materialized
// views feed.
//
// Every other kill is aimed: it is sent as soon as the writer logs that an
// insert started; the others land at random moments. The writer logs each
// insert attempt's start and end (at debug level), and the test reads the
// log of each killed process: a kill landed during an insert when the
// process logged more starts than ends. At least a quarter of the kills
// must have landed so. (The test also logs how many audit inserts the
// server still ran right after each kill.) Records are produced for as long
// as the kills go on, so the writer always has inserts to make.
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
	stopProducing := make(chan struct{})
	go func() { produced <- produceRun(t, brokers, cat, produceSeed, 100*time.Millisecond, stopProducing) }()

	logs := filepath.Join(t.TempDir(), "audit-writer.log")
	logf, err := os.Create(logs)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	start := func() *writerProcess {
		cmd := exec.Command(bin, "audit-writer")
		cmd.Env = append(os.Environ(),
			"HERALD_BROKERS="+brokers[0],
			"HERALD_TOPIC_PREFIX="+cat.Options().Prefix,
			"HERALD_CLICKHOUSE_ADDR="+addr,
			"HERALD_DATABASE="+db,
			"HERALD_BATCH_ROWS=5000",
			"HERALD_FLUSH_INTERVAL=100ms",
			"HERALD_LOG_LEVEL=debug",
		)
		return startWriter(t, cmd, logf)
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

	// The private server may be restarting after a crash: `herald
	// audit-writer` exits at once if ClickHouse does not answer at start-up.
	startWhenUp := func() (*writerProcess, int32) {
		if c, err := ch.ping(90 * time.Second); err != nil {
			t.Fatalf("private ClickHouse server: %v", err)
		} else {
			c.Close()
		}
		crashes := ch.crashes.Load()
		return start(), crashes
	}

	midInsert := 0
	for i := range kills {
		p, crashes := startWhenUp()
		aimed := i%2 == 0
		if aimed {
			select {
			case <-p.insertStarted:
			case <-p.exited:
			case <-time.After(20 * time.Second):
				t.Logf("kill %d: no insert started within 20s; killing anyway", i+1)
			}
		} else {
			select {
			case <-p.exited:
			case <-time.After(time.Duration(200+rng.IntN(1000)) * time.Millisecond):
			}
		}
		started, ended, onItsOwn, err := p.kill()
		if err != nil {
			t.Fatalf("kill %d: %v", i+1, err)
		}
		if onItsOwn {
			if ch.crashes.Load() == crashes {
				t.Fatalf("kill %d: the audit writer exited before it was killed", i+1)
			}
			t.Logf("kill %d: the audit writer exited before it was killed, while the private server was down", i+1)
		}
		onServer := inFlightOnServer(conn, db)
		if started > ended && !onItsOwn {
			midInsert++
		}
		t.Logf("kill %d (aimed %v): inserts started %d, ended %d; audit inserts still on the server %d; %d rows in ClickHouse",
			i+1, aimed, started, ended, onServer, totalRows(conn, db))
	}
	close(stopProducing)
	t.Run("at least a quarter of the kills landed during an insert", func(t *testing.T) {
		if midInsert*4 < kills {
			t.Fatalf("%d of %d kills landed during an insert", midInsert, kills)
		}
		t.Logf("%d of %d kills landed during an insert", midInsert, kills)
	})
	want := <-produced
	if want == nil {
		t.Fatal("producing the run failed")
	}
	total := 0
	for _, n := range want {
		total += n
	}
	rowsBefore := max(totalRows(conn, db), 0)
	began := time.Now()
	// The last run goes on until ClickHouse holds every record; a writer
	// that exits on its own fails the test, unless the private server
	// crashed (then it is started again).
	var mu sync.Mutex
	last, crashes := startWhenUp()
	failed, supervised, unsupervised := make(chan error, 1), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(unsupervised)
		for {
			mu.Lock()
			p, c := last, crashes
			mu.Unlock()
			select {
			case <-supervised:
				return
			case <-p.exited:
				if ch.crashes.Load() == c {
					failed <- p.err
					return
				}
				t.Logf("the audit writer exited while the private server was down (%v); starting it again", p.err)
				mu.Lock()
				last, crashes = startWhenUp()
				mu.Unlock()
			}
		}
	}()
	fixture.WaitForRows(t, conn, db, want, failed)
	close(supervised)
	<-unsupervised
	el := time.Since(began)
	t.Logf("the last run wrote %d rows in %s (%.0f rows/s, including start-up)", total-rowsBefore, el.Round(time.Millisecond),
		float64(total-rowsBefore)/el.Seconds())
	mu.Lock()
	p := last
	mu.Unlock()
	if err := p.stop(); err != nil {
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
	for table, n := range want {
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
	if total < killRecords {
		t.Fatalf("produced %d records, want at least %d", total, killRecords)
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

// writerProcess is a running `herald audit-writer` whose log the test
// reads line by line.
type writerProcess struct {
	cmd            *exec.Cmd
	insertStarted  chan struct{} // receives (without blocking) at each insert start
	exited         chan struct{} // closed when the process has exited
	logging        chan struct{} // closed at its first log line: its signal handler is set by then
	err            error         // the result of Wait, once exited is closed
	started, ended atomic.Int64  // insert attempts logged as started and ended
	killed         atomic.Bool
	onItsOwn       atomic.Bool // it exited before it was killed or stopped
}

// startWriter starts cmd, copying its log to logf.
func startWriter(t *testing.T, cmd *exec.Cmd, logf *os.File) *writerProcess {
	t.Helper()
	p := &writerProcess{cmd: cmd, insertStarted: make(chan struct{}, 1), exited: make(chan struct{}), logging: make(chan struct{})}
	cmd.Stdout = logf
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var once sync.Once
		for sc.Scan() {
			once.Do(func() { close(p.logging) })
			line := sc.Bytes()
			logf.Write(append(line, '\n'))
			switch {
			case bytes.Contains(line, []byte(`msg="insert started"`)):
				p.started.Add(1)
				select {
				case p.insertStarted <- struct{}{}:
				default:
				}
			case bytes.Contains(line, []byte(`msg="insert ended"`)):
				p.ended.Add(1)
			}
		}
		p.err = cmd.Wait() // after the last read of the pipe, as Wait requires
		p.onItsOwn.Store(!p.killed.Load())
		close(p.exited)
	}()
	t.Cleanup(func() { // a test that ends early leaves no process behind
		p.killed.Store(true)
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// kill sends SIGKILL and returns the insert starts and ends the process
// logged, and whether it had exited on its own before.
func (p *writerProcess) kill() (started, ended int64, onItsOwn bool, err error) {
	p.killed.Store(true)
	select {
	case <-p.exited:
	default:
		if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return 0, 0, false, err
		}
		<-p.exited
	}
	return p.started.Load(), p.ended.Load(), p.onItsOwn.Load(), nil
}

// stop sends SIGINT, once the process logs (herald sets its signal handler
// before its command logs anything: a SIGINT sent a few milliseconds after
// the start would end it as the default handler does), and returns how the
// process ended.
func (p *writerProcess) stop() error {
	p.killed.Store(true)
	select {
	case <-p.logging:
	case <-p.exited:
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		return err
	}
	<-p.exited
	return p.err
}

// inFlightOnServer counts the audit inserts the server is running into db;
// -1 when it does not answer.
func inFlightOnServer(conn driver.Conn, db string) int {
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM system.processes WHERE startsWith(query_id, ?)",
		"herald-audit-"+db+"-").Scan(&n); err != nil {
		return -1
	}
	return int(n)
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
// topics, and goes on until stop is closed (when it is not nil), in
// transactions of 1000 with a pause after each, with an aborted transaction
// every tenth (its records must never be written). Record times grow by
// 10 ms a record from two hours ago (a run crosses into a new month when
// it starts in the first hours of one). It returns the committed records per
// table.
func produceRun(t testing.TB, brokers []string, cat *topics.Catalog, seed uint64, pause time.Duration, stop <-chan struct{}) map[string]int {
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
	at := time.Now().Add(-2 * time.Hour)
	const perTxn = 1000
	more := func() bool {
		if counts["requests"]+counts["decisions"]+counts["attempts"]+counts["outcomes"] < killRecords {
			return true
		}
		select {
		case <-stop:
			return false
		default:
			return stop != nil
		}
	}
	for txn := 0; more(); txn++ {
		abort := txn%10 == 9
		recs := make([]*kgo.Record, 0, perTxn)
		for range perTxn {
			at = at.Add(10 * time.Millisecond)
			table, rec := randomRecord(t, cat, rng, at, abort)
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
