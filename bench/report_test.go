package bench

import (
	"strings"
	"testing"
	"time"
)

var sampleRows = []Row{
	{Backend: KafkaBackend, Variant: "produce the stream (setup)", Records: 1000, Accepted: -1, Decisions: -1, Elapsed: 500 * time.Millisecond, Note: "not a decision"},
	{Backend: KafkaBackend, Variant: "dedupe stage, txn ≤ 100", Records: 1000, Accepted: 700, Decisions: 1000, Elapsed: 2 * time.Second, CPU: 9 * time.Millisecond, ServerCPU: 6500 * time.Microsecond, Note: "10 txns"},
	{Backend: PostgresBackend, Variant: "a|b", Records: 1000, Accepted: 700, Decisions: 1000, Elapsed: 250 * time.Millisecond, CPU: 2 * time.Millisecond},
}

func TestWriteTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		rows []Row
		want string
	}{
		{"no rows print the header alone", nil,
			"backend  variant  records  accepted  seconds  records/s  decisions/s  cpu µs/rec  notes\n"},
		{"text is left-aligned, numbers right-aligned, setup rows show no counts, CPU per record of the bench and of the server when measured", sampleRows, "" +
			"backend       variant                     records  accepted  seconds  records/s  decisions/s  cpu µs/rec  notes\n" +
			"herald/kafka  produce the stream (setup)     1000         -     0.50       2000            -           -  not a decision\n" +
			"herald/kafka  dedupe stage, txn ≤ 100        1000       700     2.00        500          500   9.0 + 6.5  10 txns\n" +
			"postgres      a|b                            1000       700     0.25       4000         4000         2.0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteTable(&b, tc.rows); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

func TestWriteMarkdown(t *testing.T) {
	for _, tc := range []struct {
		name string
		rows []Row
		want string
	}{
		{"numbers are right-aligned and pipes in cells escaped", sampleRows, "" +
			"| backend | variant | records | accepted | seconds | records/s | decisions/s | cpu µs/rec | notes |\n" +
			"| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n" +
			"| herald/kafka | produce the stream (setup) | 1000 | - | 0.50 | 2000 | - | - | not a decision |\n" +
			"| herald/kafka | dedupe stage, txn ≤ 100 | 1000 | 700 | 2.00 | 500 | 500 | 9.0 + 6.5 | 10 txns |\n" +
			"| postgres | a\\|b | 1000 | 700 | 0.25 | 4000 | 4000 | 2.0 |  |\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteMarkdown(&b, tc.rows); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

func TestRowRates(t *testing.T) {
	for _, tc := range []struct {
		name string
		row  Row
		want float64
	}{
		{"a second for 1000 records is 1000 per second", Row{Records: 1000, Elapsed: time.Second}, 1000},
		{"a row that took no time has no rate", Row{Records: 1000}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.row.PerSecond(tc.row.Records); got != tc.want {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
}
