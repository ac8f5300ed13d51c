package auditwriter

import (
	"log/slog"
	"strings"
	"testing"
	"time"

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
	if len(s) != 2 {
		t.Fatalf("settings %v, want only the token and insert_deduplicate", s)
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
