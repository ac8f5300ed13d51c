package auditwriter

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/topics"
)

// These tests run the repair of the roll-ups at a session's start
// (resendLastInsert) without ClickHouse: the last insert's token and
// offsets come from a memoryTable, its records from kfake. That ClickHouse
// then drops the insert from the table and stores it in the roll-ups that
// lack it is tested against the server in the full suite
// (TestTheLastInsertSentAgainFillsTheRollUpsThatLackItAndOnlyThose). Their
// waits on Kafka run on testenv.Guarded: a mutant that makes a read wait
// forever fails its test instead of holding the suite.

// logCapture keeps what the writer logs at its level and above.
type logCapture struct {
	level slog.Level
	mu    sync.Mutex
	recs  []slog.Record
}

func (l *logCapture) Enabled(_ context.Context, level slog.Level) bool { return level >= l.level }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }

// logged returns the messages logged, in order.
func (l *logCapture) logged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var msgs []string
	for _, r := range l.recs {
		msgs = append(msgs, r.Message)
	}
	return msgs
}

// attr returns, in order, the value of key in every record logged with msg.
func (l *logCapture) attr(msg, key string) []any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var vals []any
	for _, r := range l.recs {
		if r.Message == msg {
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == key {
					vals = append(vals, a.Value.Any())
				}
				return true
			})
		}
	}
	return vals
}

// produceDecisions writes n decision records to a partition of the
// decisions topic and returns them with their offsets.
func (k *fakeKafka) produceDecisions(t *testing.T, cl *kgo.Client, p int32, n int, at time.Time) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	for range n {
		r := rowRecord(t, "decisions", p, 0, at)
		r.Topic = k.cat.Name(topics.Decisions)
		recs = append(recs, r)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return recs
}

// sorted returns positions in (partition, offset) order.
func sorted(positions [][2]int64) [][2]int64 {
	out := slices.Clone(positions)
	slices.SortFunc(out, func(a, b [2]int64) int {
		if a[0] != b[0] {
			return int(a[0] - b[0])
		}
		return int(a[1] - b[1])
	})
	return out
}

// TestTheLastInsertIsSentAgainAsItWasOrNotAtAll runs resendLastInsert
// after an insert of six decisions over two Kafka partitions (offsets 1-3
// of partition 0, 0-2 of partition 1), twice, as two session starts do. The
// insert is sent again only when it can be made again exactly: the same
// records, hence the same token; otherwise the writer warns and sends
// nothing (the roll-ups keep what they have rather than count rows twice).
// A failed send is retried with its token; a lookup or read that fails, or
// a send that fails every retry, ends the session start with its error.
func TestTheLastInsertIsSentAgainAsItWasOrNotAtAll(t *testing.T) {
	down := errors.New("server down")
	cases := []struct {
		name string
		// change sets up what the session start finds, after the insert.
		change    func(t *testing.T, k *fakeKafka, w *Writer, mem *memoryTable)
		sends     int   // inserts each session start sends
		warns     bool  // it warns that the roll-ups are compared with the table only
		wantErr   error // each session start ends with it
		sendFails int   // the first sends of each session start that fail
	}{
		{"the last insert is sent again once per session start, with its token and its records", nil, 1, false, nil, 0},
		{"a table with no insert with a token yet is left alone", func(t *testing.T, _ *fakeKafka, w *Writer, _ *memoryTable) {
			w.lastToken = func(context.Context, *table) (string, error) { return "", nil }
			w.spans = func(context.Context, *table, string) (map[int32][2]int64, error) {
				t.Error("looked for the offsets of an insert with no token")
				return nil, nil
			}
		}, 0, false, nil, 0},
		{"an insert whose first records fell to Kafka's retention is not sent, with a warning", func(t *testing.T, k *fakeKafka, _ *Writer, _ *memoryTable) {
			o := kadm.Offsets{}
			o.Add(kadm.Offset{Topic: k.cat.Name(topics.Decisions), Partition: 0, At: 2})
			if _, err := kadm.NewClient(k.producer).DeleteRecords(context.Background(), o); err != nil {
				t.Fatal(err)
			}
		}, 0, true, nil, 0},
		{"an insert whose rows the table's TTL partly dropped is not sent, with a warning", func(_ *testing.T, _ *fakeKafka, w *Writer, mem *memoryTable) {
			w.spans = func(ctx context.Context, t *table, tok string) (map[int32][2]int64, error) {
				sp, err := mem.spans(ctx, t, tok)
				sp[1] = [2]int64{1, sp[1][1]} // the row of partition 1's offset 0 is gone
				return sp, err
			}
		}, 0, true, nil, 0},
		{"an error finding the last insert ends the session start with it", func(_ *testing.T, _ *fakeKafka, w *Writer, _ *memoryTable) {
			w.lastToken = func(context.Context, *table) (string, error) { return "", down }
		}, 0, false, down, 0},
		{"an error reading the last insert's offsets ends the session start with it", func(_ *testing.T, _ *fakeKafka, w *Writer, _ *memoryTable) {
			w.spans = func(context.Context, *table, string) (map[int32][2]int64, error) { return nil, down }
		}, 0, false, down, 0},
		{"an error reading the last insert from Kafka ends the session start with it", func(_ *testing.T, k *fakeKafka, _ *Writer, _ *memoryTable) {
			k.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Err: kerr.TopicAuthorizationFailed, Count: -1})
		}, 0, false, kerr.TopicAuthorizationFailed, 0},
		{"a failed send is retried with its token and lands", nil, 2, false, nil, 1},
		{"a send that fails every retry ends the session start with its error", nil, 4, false, down, 99},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := testenv.Guarded(t)
			k := newFakeKafka(t)
			at := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
			p0, p1 := k.produceDecisions(t, k.producer, 0, 5, at), k.produceDecisions(t, k.producer, 1, 3, at)
			logs := &logCapture{level: slog.LevelWarn}
			w := fastWriter(t, Options{Brokers: k.brokers, Catalog: k.cat, ClientOpts: embedded.ClientOpts(), Logger: slog.New(logs),
				InsertRetries: 3})
			mem := newMemoryTable(nil)
			w.insertBatch, w.lastToken, w.spans = mem.insert, mem.lastToken, mem.spans
			tb := w.byName[k.cat.Name(topics.Decisions)]
			b := tb.newBatch()
			for _, r := range append(p0[1:4], p1...) {
				add(b, r)
			}
			if err := w.flush(ctx, tb, b); err != nil {
				t.Fatal(err)
			}
			tok, _ := mem.lastToken(ctx, tb) // the flush's token: the batch's, with a suffix of its own
			if !strings.HasPrefix(tok, token(tb.name, b)+"-") {
				t.Fatalf("the insert's token %s does not start with the batch's %s", tok, token(tb.name, b))
			}
			first := record(b, tok)
			if c.change != nil {
				c.change(t, k, w, mem)
			}
			var sent []inserted
			w.insertBatch = func(ctx context.Context, table string, b batch, tok string) error {
				if table != tb.name {
					t.Errorf("sent again into %s, want %s", table, tb.name)
				}
				sent = append(sent, record(b, tok))
				if len(sent) <= c.sendFails {
					return down
				}
				return mem.insert(ctx, table, b, tok)
			}
			for i := 1; i <= 2; i++ {
				sent = sent[:0]
				err := w.resendLastInsert(ctx, tb)
				if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
					t.Fatalf("session start %d ended with %v, want %v", i, err, c.wantErr)
				}
				if len(sent) != c.sends {
					t.Fatalf("session start %d sent %d inserts, want %d", i, len(sent), c.sends)
				}
				for _, in := range sent {
					if in.token != first.token || !slices.Equal(sorted(in.positions), sorted(first.positions)) {
						t.Fatalf("session start %d sent token %s with %v, want the last insert's %s with %v",
							i, in.token, sorted(in.positions), first.token, sorted(first.positions))
					}
				}
			}
			for pos, n := range mem.rows[tb.name] {
				if n != 1 {
					t.Errorf("the table holds the record at %v %d times", pos, n)
				}
			}
			leftAlone := slices.DeleteFunc(logs.logged(), func(msg string) bool { return !strings.Contains(msg, "compared with the table only") })
			if warned := len(leftAlone) > 0; warned != c.warns {
				t.Fatalf("warnings %q, want a warning: %v", logs.logged(), c.warns)
			}
		})
	}
}

// TestAnInsertIsReadAgainFromKafkaAsTheSessionReadIt reads spans of a
// decisions topic on kfake again: partition 0 holds offsets 0-4 written
// outside transactions; partition 1 a committed transaction (0-1), an
// aborted one (3-4) and a committed one (6-7), each followed by its
// marker. A span is read from its first offset to its last, read_committed
// as the session reads, so the batch holds what the insert held. A span
// that the log no longer (or not yet) holds whole gives no batch.
func TestAnInsertIsReadAgainFromKafkaAsTheSessionReadIt(t *testing.T) {
	listing := func(ts int64) func(kmsg.Request) bool { // ListOffsets of the log start (-2) or end (-1)
		return func(r kmsg.Request) bool {
			req := r.(*kmsg.ListOffsetsRequest)
			return len(req.Topics) > 0 && len(req.Topics[0].Partitions) > 0 && req.Topics[0].Partitions[0].Timestamp == ts
		}
	}
	cases := []struct {
		name    string
		spans   map[int32][2]int64
		deleted int64 // partition 0's records below it fell to retention
		fault   *kfake.Fault
		want    [][2]int64 // positions read, sorted
		whole   bool
		wantErr error
	}{
		{"a span is read from its first offset to its last and no further", map[int32][2]int64{0: {1, 3}}, 0, nil,
			[][2]int64{{0, 1}, {0, 2}, {0, 3}}, true, nil},
		{"spans of two partitions are read together", map[int32][2]int64{0: {3, 3}, 1: {0, 1}}, 0, nil,
			[][2]int64{{0, 3}, {1, 0}, {1, 1}}, true, nil},
		{"an aborted transaction within a span is skipped, as the session skips it", map[int32][2]int64{1: {1, 6}}, 0, nil,
			[][2]int64{{1, 1}, {1, 6}}, true, nil},
		{"a span ending at a partition's last record is read whole", map[int32][2]int64{0: {4, 4}, 1: {7, 7}}, 0, nil,
			[][2]int64{{0, 4}, {1, 7}}, true, nil},
		{"a span starting at the log start is read whole", map[int32][2]int64{0: {0, 0}}, 0, nil,
			[][2]int64{{0, 0}}, true, nil},
		{"a span starting at the log start after retention is read whole", map[int32][2]int64{0: {2, 2}}, 2, nil,
			[][2]int64{{0, 2}}, true, nil},
		{"a span whose first record fell to retention is not whole", map[int32][2]int64{0: {1, 3}}, 2, nil, nil, false, nil},
		{"a span past the end of the log is not whole", map[int32][2]int64{0: {3, 5}}, 0, nil, nil, false, nil},
		{"a span of a partition the topic does not have is not whole", map[int32][2]int64{0: {1, 1}, 7: {0, 0}}, 0, nil, nil, false, nil},
		{"a fetch error ends the reading with it", map[int32][2]int64{0: {1, 3}, 1: {0, 1}}, 0,
			&kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Err: kerr.TopicAuthorizationFailed, Count: -1}, nil, false, kerr.TopicAuthorizationFailed},
		{"an error listing the log starts ends the reading with it", map[int32][2]int64{0: {1, 3}}, 0,
			&kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Err: kerr.TopicAuthorizationFailed, Count: -1, When: listing(-2)}, nil, false, kerr.TopicAuthorizationFailed},
		{"an error listing the log ends ends the reading with it", map[int32][2]int64{0: {1, 3}}, 0,
			&kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Err: kerr.TopicAuthorizationFailed, Count: -1, When: listing(-1)}, nil, false, kerr.TopicAuthorizationFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := testenv.Guarded(t)
			k := newFakeKafka(t)
			at := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
			k.produceDecisions(t, k.producer, 0, 5, at)
			tx := k.client(t, kgo.TransactionalID("tx-audit"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			for _, end := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort, kgo.TryCommit} {
				if err := tx.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				recs := k.produceDecisions(t, tx, 1, 2, at)
				if err := tx.EndTransaction(ctx, end); err != nil {
					t.Fatal(err)
				}
				if first := recs[0].Offset; first%3 != 0 {
					t.Fatalf("a transaction starts at offset %d, want 0, 3 or 6", first)
				}
			}
			if c.deleted > 0 {
				o := kadm.Offsets{}
				o.Add(kadm.Offset{Topic: k.cat.Name(topics.Decisions), Partition: 0, At: c.deleted})
				if _, err := kadm.NewClient(k.producer).DeleteRecords(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			if c.fault != nil {
				k.cluster.Fault(*c.fault)
			}
			w := fastWriter(t, Options{Brokers: k.brokers, Catalog: k.cat, ClientOpts: embedded.ClientOpts()})
			tb := w.byName[k.cat.Name(topics.Decisions)]
			b, whole, err := w.readAgain(ctx, tb, c.spans)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("read ended with %v, want %v", err, c.wantErr)
			}
			if whole != c.whole {
				t.Fatalf("whole = %v, want %v", whole, c.whole)
			}
			if !whole {
				if b != nil {
					t.Fatalf("a batch of %d rows came with a read that is not whole", b.len())
				}
				return
			}
			if got := sorted(record(b, "").positions); !slices.Equal(got, c.want) {
				t.Fatalf("read %v again, want %v", got, c.want)
			}
		})
	}
}

func TestAFetchErrorOtherThanALossEndsTheSessionWithIt(t *testing.T) {
	k := newFakeKafka(t)
	k.produceDecisions(t, k.producer, 0, 3, time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC))
	k.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: k.cat.Name(topics.Decisions), Err: kerr.TopicAuthorizationFailed, Count: -1})
	w := fastWriter(t, Options{Brokers: k.brokers, Catalog: k.cat, ClientOpts: embedded.ClientOpts()})
	w.inFlight = func(context.Context) (uint64, error) { return 0, nil }
	w.stored = func(context.Context, *table) (map[int32]int64, error) { return nil, nil }
	w.insertBatch = func(context.Context, string, batch, string) error {
		t.Error("inserted rows of a topic whose fetches fail")
		return nil
	}
	if err := w.session(testenv.Guarded(t)); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("session ended with %v, want the fetch error", err)
	}
}

func TestAtShutdownEveryTablesPendingRowsAndOnlyThoseAreHandedToItsInserter(t *testing.T) {
	w := fastWriter(t, Options{})
	mem := newMemoryTable(nil)
	w.insertBatch = mem.insert
	errc, stop := w.startInserters(context.Background())
	at := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	for _, name := range []string{"requests", "decisions", "attempts"} {
		for _, tb := range w.tables {
			if tb.name == name {
				if err := w.addRecord(tb, rowRecord(t, name, 0, 4, at), time.Now(), errc); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := w.drain(errc); err != nil {
		t.Fatal(err)
	}
	stop()
	for _, name := range []string{"requests", "decisions", "attempts"} {
		if n := mem.rows[name][[2]int64{0, 4}]; n != 1 {
			t.Errorf("%s holds its pending row %d times, want once", name, n)
		}
	}
	if mem.count() != 3 || mem.calls != 3 {
		t.Errorf("%d rows stored in %d inserts, want the 3 pending in 3 (none for a table without pending rows)", mem.count(), mem.calls)
	}
}
