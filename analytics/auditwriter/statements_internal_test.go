package auditwriter

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/migrations"
)

// These tests pin what the writer sends to ClickHouse (statements, settings,
// query ids) without a server; the full suite runs them against chDB.

func TestEveryInsertCarriesItsDeduplicationToken(t *testing.T) {
	s := insertSettings("tok-1")
	if got := s["insert_deduplication_token"]; got != "tok-1" {
		t.Fatalf("insert_deduplication_token = %v, want the batch's token", got)
	}
	if got := s["insert_deduplicate"]; got != 1 {
		t.Fatalf("insert_deduplicate = %v, want 1 (deduplication on for the insert)", got)
	}
	if got := s["deduplicate_blocks_in_dependent_materialized_views"]; got != 1 {
		t.Fatalf("deduplicate_blocks_in_dependent_materialized_views = %v, want 1 (each roll-up checks the token itself)", got)
	}
	if len(s) != 3 {
		t.Fatalf("settings %v, want only the token, insert_deduplicate and the roll-ups' deduplication", s)
	}
}

func TestAnInsertNamesItsDatabaseTableAndColumns(t *testing.T) {
	got := insertStatement("herald_x", "decisions", []string{"kafka_topic", "kafka_partition", "kafka_offset"})
	want := "INSERT INTO `herald_x`.`decisions` (kafka_topic, kafka_partition, kafka_offset)"
	if got != want {
		t.Fatalf("statement %q, want %q", got, want)
	}
}

func TestTheStoredOffsetsAreTheHighestPerPartitionOfTheTablesTopic(t *testing.T) {
	got := storedOffsetsQuery("herald_x", "attempts")
	want := "SELECT kafka_partition, max(kafka_offset) FROM `herald_x`.`attempts` WHERE kafka_topic = ? GROUP BY kafka_partition"
	if got != want {
		t.Fatalf("query %q, want %q", got, want)
	}
}

func TestTheLastInsertIsTheLatestWrittenOneWithAToken(t *testing.T) {
	got := lastInsertQuery("herald_x", "decisions")
	want := "SELECT insert_token FROM `herald_x`.`decisions` WHERE kafka_topic = ? AND insert_token != '' ORDER BY written_at DESC LIMIT 1"
	if got != want {
		t.Fatalf("query %q, want %q", got, want)
	}
}

func TestTheLastInsertsSpansAreItsFirstAndLastOffsetPerPartition(t *testing.T) {
	got := insertSpansQuery("herald_x", "decisions")
	want := "SELECT kafka_partition, min(kafka_offset), max(kafka_offset) FROM `herald_x`.`decisions` WHERE kafka_topic = ? AND insert_token = ? GROUP BY kafka_partition"
	if got != want {
		t.Fatalf("query %q, want %q", got, want)
	}
}

func TestEveryInsertedRowCarriesItsInsertsToken(t *testing.T) {
	b := newDecisionsBatch()
	add(b, decisionRecord(t, 0, 7))
	add(b, decisionRecord(t, 0, 8))
	names, cols := insertColumns(b, "tok-1")
	if names[len(names)-1] != "insert_token" {
		t.Fatalf("last column %q, want insert_token", names[len(names)-1])
	}
	if got := cols[len(cols)-1].([]string); len(got) != 2 || got[0] != "tok-1" || got[1] != "tok-1" {
		t.Fatalf("insert_token column %v, want the token once per row", got)
	}
}

func TestEveryInsertsQueryIDIsFoundByTheWaitForInsertsInFlight(t *testing.T) {
	w := fastWriter(t, Options{})
	a, b := w.insertQueryID("decisions"), w.insertQueryID("decisions")
	for _, id := range []string{a, b} {
		if !strings.HasPrefix(id, w.queryIDPrefix()+"decisions-") {
			t.Fatalf("query id %q does not start with %q, which awaitInFlightInserts looks for", id, w.queryIDPrefix())
		}
	}
	if a == b {
		t.Fatalf("two inserts got the same query id %q", a)
	}
	if p := w.queryIDPrefix(); p != "herald-audit-herald_fast-" {
		t.Fatalf("prefix %q, want one naming the database", p)
	}
}

func TestTheWaitForInsertsInFlightIsLoggedWhenItBeginsThenEveryTenSeconds(t *testing.T) {
	cases := []struct {
		name   string
		waited time.Duration
		level  slog.Level
		logged bool
	}{
		{"the wait is logged when it begins", 0, slog.LevelInfo, true},
		{"a look within the first ten seconds is not logged", 100 * time.Millisecond, 0, false},
		{"a look past ten seconds but off the mark is not logged", 10*time.Second + 100*time.Millisecond, 0, false},
		{"a wait of ten seconds is warned about", 10 * time.Second, slog.LevelWarn, true},
		{"a wait of thirty seconds is warned about", 30 * time.Second, slog.LevelWarn, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			level, msg, ok := inFlightNotice(c.waited)
			if ok != c.logged || level != c.level || ok == (msg == "") {
				t.Fatalf("after %v: logged %v at %v (%q), want logged %v at %v", c.waited, ok, level, msg, c.logged, c.level)
			}
		})
	}
}

func TestAWriterRefusesADatabaseWithPendingMigrations(t *testing.T) {
	if err := notMigrated("herald_x", nil); err != nil {
		t.Fatalf("a migrated database refused: %v", err)
	}
	err := notMigrated("herald_x", []migrations.Migration{{Version: 3, Name: "outcomes"}, {Version: 4, Name: "rollups"}})
	if err == nil {
		t.Fatal("a database with pending migrations accepted")
	}
	if !strings.Contains(err.Error(), "lacks 2 migration(s) (first: 0003_outcomes)") {
		t.Fatalf("error %q does not name the pending migrations", err)
	}
}

func TestAWritersUnsetOptionsTakeTheirDefaultsAndSetOnesAreKept(t *testing.T) {
	cases := []struct {
		name                 string
		rows, retries        int
		flush                time.Duration
		wantRows, wantRetrys int
		wantFlush            time.Duration
	}{
		{"zero options take the defaults", 0, 0, 0, 50_000, 3, time.Second},
		{"negative options take the defaults", -1, -1, -1, 50_000, 3, time.Second},
		{"set options are kept", 1, 1, time.Millisecond, 1, 1, time.Millisecond},
		{"a batch is never larger than a million rows", maxBatchRows + 1, 1, time.Millisecond, maxBatchRows, 1, time.Millisecond},
		{"a batch of a million rows is allowed", maxBatchRows, 1, time.Millisecond, maxBatchRows, 1, time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := fastWriter(t, Options{BatchRows: c.rows, InsertRetries: c.retries, FlushInterval: c.flush})
			if w.o.BatchRows != c.wantRows || w.o.InsertRetries != c.wantRetrys || w.o.FlushInterval != c.wantFlush {
				t.Fatalf("rows %d retries %d flush %v, want %d %d %v", w.o.BatchRows, w.o.InsertRetries, w.o.FlushInterval,
					c.wantRows, c.wantRetrys, c.wantFlush)
			}
		})
	}
	t.Run("a writer without brokers, catalog or connection is refused", func(t *testing.T) {
		if _, err := New(Options{}); err == nil {
			t.Fatal("empty options accepted")
		}
	})
}

func TestASessionThatKeepsFailingStartsOverLessAndLessOften(t *testing.T) {
	const first = time.Second
	cases := []struct {
		name      string
		prev, ran time.Duration
		want      time.Duration
	}{
		{"the first failure pauses the first pause", 0, time.Millisecond, first},
		{"a quick failure after a pause doubles it", 4 * time.Second, time.Second, 8 * time.Second},
		{"a session of exactly a minute still counts as quick", 4 * time.Second, time.Minute, 8 * time.Second},
		{"the pause stops growing at 30 s", 20 * time.Second, time.Second, 30 * time.Second},
		{"a session that ran over a minute starts the pauses over", 20 * time.Second, time.Minute + time.Millisecond, first},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := restartPause(first, c.prev, c.ran); got != c.want {
				t.Fatalf("restartPause(%v, %v, %v) = %v, want %v", first, c.prev, c.ran, got, c.want)
			}
		})
	}
}

func TestABatchIsHandedOffOnceItsValuesReachTheByteBound(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	recs := []*kgo.Record{decisionAt(t, 0, 1, at), decisionAt(t, 0, 2, at), decisionAt(t, 0, 3, at)}
	size := len(recs[0].Value) // the records have values of one length
	cases := []struct {
		name    string
		bound   int
		inserts int
	}{
		{"values reaching the bound close the batch", 2 * size, 2},
		{"values below the bound do not", 3*size + 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range recs {
				if len(r.Value) != size {
					t.Fatalf("record values of %d and %d bytes", size, len(r.Value))
				}
			}
			w := fastWriter(t, Options{BatchRows: 100})
			w.maxBatchBytes = c.bound
			got, err := runBatches(t, w, recs, func(inserted) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != c.inserts {
				t.Fatalf("%d inserts, want %d", len(got), c.inserts)
			}
		})
	}
}

func TestAWritersPausesAndByteBoundDefaultToTheDocumentedValues(t *testing.T) {
	w := fastWriter(t, Options{})
	fresh, err := New(w.o) // fastWriter shortens the pauses of its writer
	if err != nil {
		t.Fatal(err)
	}
	if fresh.retryPause != 500*time.Millisecond || fresh.pollEvery != 100*time.Millisecond || fresh.restartPause != time.Second ||
		fresh.maxBatchBytes != 64<<20 {
		t.Fatalf("retry pause %v, poll every %v, restart pause %v, batch bytes %d; want 500ms, 100ms, 1s, 64 MiB",
			fresh.retryPause, fresh.pollEvery, fresh.restartPause, fresh.maxBatchBytes)
	}
}

func TestTheNextPollEndsWhenTheOldestPendingRowIsDue(t *testing.T) {
	const interval = time.Hour
	w := fastWriter(t, Options{FlushInterval: interval})
	for _, tb := range w.tables {
		tb.cur = tb.newBatch()
	}
	now := time.Now()
	// An empty batch's first is stale: it must not count.
	w.byName["herald.requests"].first = now.Add(-10 * interval)
	if d := w.nextDeadline(); d.Before(now.Add(interval)) {
		t.Fatalf("with no pending row the poll ends at %v, want a whole interval away (after %v)", d, now.Add(interval))
	}
	dec := w.byName["herald.decisions"]
	add(dec.cur, decisionAt(t, 0, 1, now))
	dec.first = now.Add(-interval / 2)
	att := w.byName["herald.attempts"]
	att.cur, att.first = dec.cur, now.Add(-interval/4) // a later pending row
	if d := w.nextDeadline(); !d.Equal(dec.first.Add(interval)) {
		t.Fatalf("the poll ends at %v, want when the oldest pending row is due, %v", d, dec.first.Add(interval))
	}
}

func TestABatchIsDueOnceItsOldestRowHasWaitedTheFlushInterval(t *testing.T) {
	const interval = time.Second
	w := fastWriter(t, Options{FlushInterval: interval})
	dec := w.byName["herald.decisions"]
	dec.cur = dec.newBatch()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	dec.first = t0.Add(-time.Hour) // stale: the batch is empty
	if w.due(dec, t0) {
		t.Fatal("an empty batch is due")
	}
	// The wait counts from the batch's first row, not its latest.
	for i, now := range []time.Time{t0, t0.Add(interval / 2)} {
		if err := w.addRecord(dec, decisionAt(t, 0, int64(i), t0), now, nil); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		now  time.Time
		due  bool
	}{
		{"a batch whose oldest row has waited less than the interval is not due", t0.Add(interval - time.Nanosecond), false},
		{"a batch whose oldest row has waited the interval is due", t0.Add(interval), true},
		{"a batch whose oldest row has waited longer is due", t0.Add(2 * interval), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := w.due(dec, c.now); got != c.due {
				t.Fatalf("due %v after %v, want %v", got, c.now.Sub(t0), c.due)
			}
		})
	}
}
