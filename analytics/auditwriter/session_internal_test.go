package auditwriter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// These tests run the writer's logic without Kafka or ClickHouse: the
// batching of the poll loop, the inserters, the retries of an insert, the
// wait for inserts in flight and the resume positions. What ClickHouse does
// with the inserts is tested against the server in the full suite.

// fastWriter is a writer whose ClickHouse connection is never used (the
// tests replace what would use it). It logs to o.Logger, or nowhere.
func fastWriter(t *testing.T, o Options) *Writer {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if o.Brokers == nil {
		o.Brokers, o.Catalog = []string{"127.0.0.1:1"}, topics.New(topics.Options{})
	}
	o.ClickHouse, o.Database, o.Metrics = conn, "herald_fast", metrics.NewRegistry()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	w.retryPause, w.pollEvery = time.Millisecond, time.Millisecond
	w.resendLast = func(context.Context, *table) error { return nil }
	w.repair = func(context.Context, *table, string) error { return nil } // no ClickHouse here
	w.holds = func(context.Context, *table, string) (bool, error) { return true, nil }
	return w
}

// decisionAt is a decision record of a partition and offset whose row time
// is at.
func decisionAt(t *testing.T, partition int32, offset int64, at time.Time) *kgo.Record {
	t.Helper()
	r := decisionRecord(t, partition, offset)
	d := schemas.Decision{DecisionID: fmt.Sprintf("d/%d/%d", partition, offset), Stage: "dedupe", Outcome: schemas.DecisionAccepted,
		Tenant: "acme", Type: "invoice.paid", Recipient: "u_1", NotificationID: "52f364d9288c640b306b566e509104bd", At: at.UnixMilli()}
	b, err := schemas.Encode(&d)
	if err != nil {
		t.Fatal(err)
	}
	r.Value = b
	return r
}

// inserted is what one call of insertBatch received.
type inserted struct {
	months    []int32 // of the rows, from the at column
	positions [][2]int64
	token     string
}

func record(b batch, tok string) inserted {
	names, cols := b.columns()
	var in inserted
	in.token = tok
	for i, n := range names {
		switch n {
		case "at":
			for _, at := range cols[i].([]time.Time) {
				in.months = append(in.months, monthOf(at.UnixMilli()))
			}
		case "kafka_offset":
			parts := cols[i-1].([]int32)
			for j, o := range cols[i].([]int64) {
				in.positions = append(in.positions, [2]int64{int64(parts[j]), o})
			}
		}
	}
	return in
}

// runBatches feeds records to the decisions table through addRecord, with
// inserters whose inserts go to insert, and returns what the inserts
// received, in order, and the first error an inserter reported.
func runBatches(t *testing.T, w *Writer, recs []*kgo.Record, insert func(in inserted) error) ([]inserted, error) {
	t.Helper()
	var mu sync.Mutex
	var got []inserted
	w.insertBatch = func(_ context.Context, _ string, b batch, tok string) error {
		in := record(b, tok)
		mu.Lock()
		got = append(got, in)
		mu.Unlock()
		return insert(in)
	}
	errc, stop := w.startInserters(context.Background())
	tb := w.byName["herald.decisions"]
	var err error
	for _, r := range recs {
		if err = w.addRecord(tb, r, time.Now(), errc); err != nil {
			break
		}
	}
	if err == nil && tb.cur.len() > 0 {
		err = w.handOff(tb, errc)
	}
	stop()
	if err == nil {
		select {
		case err = <-errc:
		default:
		}
	}
	return got, err
}

func TestEveryInsertHoldsRowsOfOneMonthInOffsetOrder(t *testing.T) {
	turn := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	nov, dec := turn.Add(-time.Millisecond), turn
	// p0 and p1 cross the turn of the month at different offsets, and
	// arrive interleaved as fetches deliver them.
	crossing := []*kgo.Record{
		decisionAt(t, 0, 10, nov.Add(-time.Second)), decisionAt(t, 0, 11, nov),
		decisionAt(t, 1, 5, nov), decisionAt(t, 1, 6, dec),
		decisionAt(t, 0, 12, dec), decisionAt(t, 0, 13, dec.Add(time.Second)),
		decisionAt(t, 1, 7, dec.Add(time.Second)),
	}
	// A late record of the earlier month after the turn.
	late := []*kgo.Record{decisionAt(t, 0, 20, nov), decisionAt(t, 0, 21, dec), decisionAt(t, 0, 22, nov), decisionAt(t, 0, 23, dec)}
	oneMonth := []*kgo.Record{decisionAt(t, 0, 1, dec), decisionAt(t, 1, 1, dec), decisionAt(t, 0, 2, dec)}
	cases := []struct {
		name    string
		recs    []*kgo.Record
		rows    int
		inserts int
	}{
		{"records of one month make one insert", oneMonth, 100, 1},
		{"a batch across the turn of a month is cut where the month changes", crossing, 100, 2},
		{"a late record of the earlier month is an insert of its own", late, 100, 4},
		{"a full batch is inserted without waiting for the next month", oneMonth, 2, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := fastWriter(t, Options{BatchRows: c.rows})
			got, err := runBatches(t, w, c.recs, func(inserted) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != c.inserts {
				t.Errorf("%d inserts, want %d: %+v", len(got), c.inserts, got)
			}
			var positions [][2]int64
			tokens := map[string]bool{}
			for _, in := range got {
				if slices.Min(in.months) != slices.Max(in.months) {
					t.Errorf("one insert holds rows of months %v", in.months)
				}
				if tokens[in.token] {
					t.Errorf("two inserts share the token %s", in.token)
				}
				tokens[in.token] = true
				positions = append(positions, in.positions...)
			}
			var want [][2]int64
			for _, r := range c.recs {
				want = append(want, [2]int64{int64(r.Partition), r.Offset})
			}
			if !slices.Equal(positions, want) {
				t.Errorf("inserts hold positions %v in this order, want every record once in arrival order %v", positions, want)
			}
		})
	}
}

func TestAFailedInsertStopsEveryLaterInsertOfItsTable(t *testing.T) {
	turn := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	recs := []*kgo.Record{
		decisionAt(t, 0, 1, turn.Add(-time.Second)), decisionAt(t, 0, 2, turn), decisionAt(t, 0, 3, turn.Add(-time.Second)),
	}
	fail := errors.New("injected")
	cases := []struct {
		name      string
		failMonth int32
		calls     int
	}{
		{"a failing earlier month holds back the later month", 202611, 1},
		{"a failing later month stops the late rows of the earlier month after it", 202612, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := fastWriter(t, Options{InsertRetries: 1})
			got, err := runBatches(t, w, recs, func(in inserted) error {
				if in.months[0] == c.failMonth {
					return fail
				}
				return nil
			})
			if !errors.Is(err, fail) {
				t.Fatalf("session error %v, want the insert's", err)
			}
			// Each failed insert is tried twice (InsertRetries 1), with the
			// same token.
			var distinct []string
			for _, in := range got {
				if !slices.Contains(distinct, in.token) {
					distinct = append(distinct, in.token)
				}
			}
			if len(distinct) != c.calls {
				t.Fatalf("%d distinct inserts, want %d (nothing after the failed one)", len(distinct), c.calls)
			}
			if last := got[len(got)-1]; last.months[0] != c.failMonth || got[len(got)-2].token != last.token {
				t.Fatalf("the last inserts were %+v, want the failed one twice", got[len(got)-2:])
			}
		})
	}
}

func TestAnInsertIsRetriedWithTheSameToken(t *testing.T) {
	fail := errors.New("connection reset")
	cases := []struct {
		name     string
		failures int // attempts that fail before one succeeds
		retries  int
		wantErr  bool
		// lost: the table holds no row of a failed attempt's token (its
		// deduplication record may have outlived its part), so each retry
		// takes a new token; else the table holds the rows and the retry
		// keeps the token.
		lost bool
	}{
		{"an insert that succeeds at once is tried once", 0, 3, false, false},
		{"a failed insert is retried with the same token until it succeeds", 2, 3, false, false},
		{"an insert that fails every retry ends the session with its error", 4, 3, true, false},
		{"a failed insert whose rows the table lacks is retried under a new token each time", 2, 3, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logs := &logCapture{level: slog.LevelDebug}
			w := fastWriter(t, Options{InsertRetries: c.retries, Logger: slog.New(logs)})
			tb := w.byName["herald.decisions"]
			b := tb.newBatch()
			add(b, decisionRecord(t, 0, 7))
			add(b, decisionRecord(t, 0, 8))
			var tokens []string
			w.holds = func(context.Context, *table, string) (bool, error) { return !c.lost, nil }
			w.insertBatch = func(_ context.Context, table string, _ batch, tok string) error {
				if table != "decisions" {
					t.Errorf("insert into %s", table)
				}
				tokens = append(tokens, tok)
				if len(tokens) <= c.failures {
					return fail
				}
				return nil
			}
			err := w.flush(context.Background(), tb, b)
			if gotErr := errors.Is(err, fail); gotErr != c.wantErr {
				t.Fatalf("flush error %v, want an error: %v", err, c.wantErr)
			}
			attempts := min(c.failures+1, c.retries+1)
			if len(tokens) != attempts {
				t.Fatalf("%d attempts, want %d", len(tokens), attempts)
			}
			for i, tok := range tokens {
				if !strings.HasPrefix(tok, token("decisions", b)+"-") {
					t.Fatalf("attempt tokens %v, want every one to start with the batch's %s-", tokens, token("decisions", b))
				}
				if i > 0 && (tok == tokens[i-1]) == c.lost {
					t.Fatalf("attempt tokens %v: want each retry's token new: %v", tokens, c.lost)
				}
			}
			// Each attempt is logged when it starts and when it ends, with
			// whether it landed (the kill test counts these lines).
			var oks []any
			for i := range attempts {
				oks = append(oks, !c.wantErr && i == attempts-1)
			}
			if started, ended := logs.attr("insert started", "attempt"), logs.attr("insert ended", "ok"); len(started) != attempts ||
				!slices.Equal(ended, oks) {
				t.Fatalf("logged %d attempts started and ended with ok %v, want %d and %v", len(started), ended, attempts, oks)
			}
			rows, inserts, retries := int64(2), int64(1), int64(attempts-1)
			if c.wantErr {
				rows, inserts = 0, 0
			}
			if tb.rows.Value() != rows || tb.inserts.Value() != inserts || tb.retries.Value() != retries {
				t.Fatalf("counted rows %d, inserts %d, retries %d; want %d, %d, %d",
					tb.rows.Value(), tb.inserts.Value(), tb.retries.Value(), rows, inserts, retries)
			}
		})
	}
}

func TestResumingWaitsForEveryInsertInFlight(t *testing.T) {
	down := errors.New("server down")
	cases := []struct {
		name    string
		counts  []uint64 // answers of successive looks
		err     error    // after the counts
		cancel  bool
		wantErr error
		looks   int
	}{
		{"with nothing in flight it resumes at once", []uint64{0}, nil, false, nil, 1},
		{"it looks again until no insert is in flight", []uint64{2, 1, 1, 0}, nil, false, nil, 4},
		{"an error looking ends the session", []uint64{1}, down, false, down, 2},
		{"a stop while inserts are in flight ends the wait", []uint64{1, 1, 1}, nil, true, context.Canceled, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logs := &logCapture{level: slog.LevelInfo}
			w := fastWriter(t, Options{Logger: slog.New(logs)})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			looks := 0
			w.inFlight = func(context.Context) (uint64, error) {
				looks++
				if looks > len(c.counts) {
					if c.err != nil {
						return 0, c.err
					}
					t.Fatal("looked again after the wait should have ended")
				}
				if c.cancel && looks == len(c.counts) {
					cancel()
				}
				return c.counts[looks-1], nil
			}
			err := w.awaitInFlightInserts(ctx)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("wait ended with %v, want %v", err, c.wantErr)
			}
			if looks != c.looks {
				t.Fatalf("%d looks, want %d", looks, c.looks)
			}
			// The end of a wait is logged; no wait, nothing.
			waited := c.wantErr == nil && c.looks > 1
			if ended := slices.Contains(logs.logged(), "inserts in flight have ended"); ended != waited {
				t.Fatalf("logged the end of the wait: %v, want %v (logged %q)", ended, waited, logs.logged())
			}
		})
	}
}

func TestEachPartitionResumesAfterItsHighestStoredOffset(t *testing.T) {
	got := resumeFrom(map[int32]int64{0: 41, 2: 0, 7: 99}, []int32{0, 1, 2})
	want := map[int32]int64{0: 42, 1: -2, 2: 1} // -2: the log start
	if len(got) != len(want) {
		t.Fatalf("resumes %d partitions, want %d (only the topic's)", len(got), len(want))
	}
	for p, off := range want {
		if o := got[p].EpochOffset().Offset; o != off {
			t.Errorf("partition %d resumes at %d, want %d", p, o, off)
		}
	}
}

func TestMonthOfIsTheTablesPartition(t *testing.T) {
	cases := []struct {
		name string
		at   time.Time
		want int32
	}{
		{"the last millisecond of a month is that month", time.Date(2026, 11, 30, 23, 59, 59, 999e6, time.UTC), 202611},
		{"midnight UTC starts the next month", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 202612},
		{"the month is UTC's, whatever the zone of the clock", time.Date(2027, 1, 1, 0, 30, 0, 0, time.FixedZone("CET", 3600)), 202612},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := monthOf(c.at.UnixMilli()); got != c.want {
				t.Fatalf("monthOf(%s) = %d, want %d", c.at, got, c.want)
			}
		})
	}
}

// memoryTable stands in for ClickHouse in the fast suite: it keeps the
// positions of the rows inserted into each table and, as ClickHouse does
// with insert_deduplication_token, drops a block whose token it has seen.
// It answers the writer's lookups as the tables' queries do: the highest
// offsets stored (stored), the token of a table's last insert (lastToken)
// and the offsets one token wrote (spans).
type memoryTable struct {
	mu     sync.Mutex
	rows   map[string]map[[2]int64]int // table → (partition, offset) → copies
	tokens map[string]bool
	last   map[string]string     // table → token of its last stored insert
	wrote  map[string][][2]int64 // token → positions it stored
	calls  int
	again  int // inserts dropped because their token was stored
	// fault decides the fate of each insert call (numbered from 1): fail
	// before storing, or store and fail (the answer is lost).
	fault func(call int, table string, month int32) (store, fail bool)
	// ghost, if set, says which calls keep their token and not their rows,
	// and fail: the server died between the block's deduplication record
	// and its part's rename.
	ghost  func(call int) bool
	ghosts int // calls that kept their token and not their rows
}

// holds reports whether rows with the token are stored (storedUnder).
func (m *memoryTable) holds(_ context.Context, _ *table, tok string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.wrote[tok]) > 0, nil
}

func (m *memoryTable) insert(_ context.Context, table string, b batch, tok string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.ghost != nil && m.ghost(m.calls) && !m.tokens[tok] {
		m.tokens[tok] = true
		m.ghosts++
		return errors.New("injected: the server died after the block's deduplication record")
	}
	store, fail := true, false
	if m.fault != nil {
		store, fail = m.fault(m.calls, table, b.month())
	}
	if store && !m.tokens[tok] {
		m.tokens[tok] = true
		in := record(b, tok)
		for _, pos := range in.positions {
			m.rows[table][pos]++
		}
		m.last[table], m.wrote[tok] = tok, in.positions
	} else if store {
		m.again++
	}
	if fail {
		return errors.New("injected")
	}
	return nil
}

func (m *memoryTable) stored(_ context.Context, t *table) (map[int32]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int32]int64{}
	for pos := range m.rows[t.name] {
		if o, ok := out[int32(pos[0])]; !ok || pos[1] > o {
			out[int32(pos[0])] = pos[1]
		}
	}
	return out, nil
}

func (m *memoryTable) lastToken(_ context.Context, t *table) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last[t.name], nil
}

func (m *memoryTable) spans(_ context.Context, _ *table, tok string) (map[int32][2]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int32][2]int64{}
	for _, pos := range m.wrote[tok] {
		p := int32(pos[0])
		sp, ok := out[p]
		if !ok || pos[1] < sp[0] {
			sp[0] = pos[1]
		}
		sp[1] = max(sp[1], pos[1])
		out[p] = sp
	}
	return out, nil
}

// newMemoryTable is an empty memoryTable for herald's tables.
func newMemoryTable(fault func(call int, table string, month int32) (store, fail bool)) *memoryTable {
	m := &memoryTable{rows: map[string]map[[2]int64]int{}, tokens: map[string]bool{}, last: map[string]string{},
		wrote: map[string][][2]int64{}, fault: fault}
	for _, name := range []string{"requests", "decisions", "attempts", "outcomes", "receipts"} {
		m.rows[name] = map[[2]int64]int{}
	}
	return m
}

func (m *memoryTable) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, rows := range m.rows {
		n += len(rows)
	}
	return n
}

// fakeKafka is a kfake cluster holding herald's topics, two partitions
// each, and a client that produces to the partition a record names.
type fakeKafka struct {
	cluster  *kfake.Cluster
	brokers  []string
	cat      *topics.Catalog
	producer *kgo.Client
}

func newFakeKafka(t *testing.T) *fakeKafka {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	k := &fakeKafka{cluster: cluster, brokers: cluster.ListenAddrs(), cat: topics.New(topics.Options{Partitions: 2, Replication: 1})}
	k.producer = k.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if _, err := k.cat.Create(context.Background(), kadm.NewClient(k.producer)); err != nil {
		t.Fatal(err)
	}
	return k
}

// client is a client of the cluster with embedded.ClientOpts and opts.
func (k *fakeKafka) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(k.brokers...)}, embedded.ClientOpts()...), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestSessionsCopyEveryRecordOnceThroughFailedInserts runs the writer's
// sessions (Kafka on kfake, ClickHouse replaced by a memoryTable) over
// records of two tables, two Kafka partitions and two months, with inserts
// that all land (one session copies everything), inserts that fail before
// landing, inserts that land and lose their answer, and inserts that fail
// every retry so that the session starts over from what is stored; every
// session starts by sending each table's last insert again
// (resendLastInsert, reading it back from kfake). Every record must be
// stored exactly once.
func TestSessionsCopyEveryRecordOnceThroughFailedInserts(t *testing.T) {
	cases := []struct {
		name     string
		fault    func(call int, table string, month int32) (store, fail bool)
		restarts bool // at least one session must start over
		once     bool // no session may start over
		ghost    func(call int) bool
	}{
		{"inserts that all land are made by one session", nil, false, true, nil},
		{"inserts that fail before landing are retried", func(call int, _ string, _ int32) (bool, bool) {
			return call%3 != 1, call%3 == 1
		}, false, false, nil},
		{"inserts that land and lose their answer are retried with their token", func(call int, _ string, _ int32) (bool, bool) {
			return true, call%2 == 1
		}, false, false, nil},
		{"a month that fails every retry makes the session start over from what is stored", func() func(int, string, int32) (bool, bool) {
			tries := 0 // of the later month's decisions: the first 4 fail, more than one session's 3 attempts
			return func(_ int, table string, month int32) (bool, bool) {
				if table != "decisions" || month != 202612 {
					return true, false
				}
				tries++
				return tries > 4, tries <= 4
			}
		}(), true, false, nil},
		{"inserts whose deduplication record outlived their rows are written again under a new token", nil, false, false,
			func(call int) bool { return call%3 == 1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := newFakeKafka(t)
			brokers, opts, cat, cl := k.brokers, embedded.ClientOpts(), k.cat, k.producer
			ctx := context.Background()
			turn := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			const perPartition = 40
			var recs []*kgo.Record
			for _, table := range []string{"requests", "decisions"} {
				for p := range int32(2) {
					for i := range perPartition {
						r := rowRecord(t, table, p, 0, turn.Add(time.Duration(i-perPartition/2)*time.Second))
						r.Topic, r.Offset = cat.Name(map[string]string{"requests": topics.Requests, "decisions": topics.Decisions}[table]), 0
						recs = append(recs, r)
					}
				}
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}

			mem := newMemoryTable(c.fault)
			mem.ghost = c.ghost
			w := fastWriter(t, Options{Brokers: brokers, Catalog: cat, ClientOpts: append(opts, kgo.FetchMaxWait(50*time.Millisecond)),
				InsertRetries: 2, BatchRows: 15, FlushInterval: 20 * time.Millisecond})
			// Every session starts by sending each table's last insert
			// again, read back from kfake.
			w.insertBatch, w.stored, w.lastToken, w.spans, w.holds = mem.insert, mem.stored, mem.lastToken, mem.spans, mem.holds
			w.resendLast = w.resendLastInsert
			w.inFlight = func(context.Context) (uint64, error) { return 0, nil }
			w.restartPause = 10 * time.Millisecond

			runCtx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); w.sessions(runCtx) }()
			deadline := time.Now().Add(testenv.Guard()) // then the counts below fail the test
			for mem.count() < len(recs) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			stop()
			testenv.Await(t, done, "the sessions to stop")
			for _, table := range []string{"requests", "decisions"} {
				rows := mem.rows[table]
				if len(rows) != 2*perPartition {
					t.Errorf("%s holds %d records, want %d", table, len(rows), 2*perPartition)
				}
				for pos, n := range rows {
					if n != 1 {
						t.Errorf("%s holds the record at %v %d times", table, pos, n)
					}
				}
			}
			if c.fault != nil && mem.calls <= len(recs)/15 {
				t.Errorf("%d insert calls: the faults were never injected", mem.calls)
			}
			if c.ghost != nil && mem.ghosts == 0 {
				t.Error("no insert kept its token without its rows: the fault was never injected")
			}
			if c.restarts && w.errs.Value() == 0 {
				t.Error("no session started over")
			}
			if c.once && w.errs.Value() != 0 {
				t.Errorf("sessions started over %d times with every insert landing", w.errs.Value())
			}
			// A session that starts over sends the last insert of the
			// decisions again (November's, stored before December's
			// failed): the table drops it.
			if c.restarts && mem.again == 0 {
				t.Error("no session sent a table's last insert again")
			}
		})
	}
}

func TestTheResumeLogNamesEachPartitionsNextOffsetInOrder(t *testing.T) {
	cases := []struct {
		name   string
		stored map[int32]int64
		want   string
	}{
		{"nothing stored resumes at the log start", nil, "log start"},
		{"partitions are listed in order with the offset after the highest stored", map[int32]int64{2: 9, 0: 4, 1: 0}, "0:5 1:1 2:10"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := describe(c.stored); got != c.want {
				t.Fatalf("describe(%v) = %q, want %q", c.stored, got, c.want)
			}
		})
	}
}
