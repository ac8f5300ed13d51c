package auditwriter

import (
	"context"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// rollUp is a materialized view of migration 0002 and the roll-up table it
// fills. Every roll-up has an hour column, toStartOfHour(at) of its rows.
type rollUp struct{ view, target string }

// rollUpsOf are the roll-ups each table feeds (TestEveryRollUpOfAMigratedDatabaseIsRepaired
// checks this against a migrated database).
var rollUpsOf = map[string][]rollUp{
	"requests":  {{"requests_hourly_mv", "requests_hourly"}},
	"decisions": {{"dedupe_hourly_mv", "dedupe_hourly"}, {"decisions_hourly_mv", "decisions_hourly"}},
	"attempts":  {{"attempts_hourly_mv", "attempts_hourly"}},
	"outcomes":  {{"outcomes_hourly_mv", "outcomes_hourly"}},
}

// repairRollUps makes each roll-up of the table count, in every hour the
// table's last insert (token tok) wrote to, what its view makes of the
// table's rows of that hour: where a roll-up counts less, it inserts the
// difference into the roll-up table itself. It runs at session start,
// after the last insert was sent again, when no insert runs.
//
// The resend repairs a roll-up that lacks the insert's part, but not one
// whose server died between the roll-up's deduplication record and its
// part's rename (MergeTreeSink::commitPart appends the block's id to the
// deduplication log, a write that survives a SIGKILL, then renames the
// part into place): that roll-up drops the resend as a duplicate of the
// part it never committed. Only the last insert can lack its roll-ups
// (see resendLastInsert), so comparing the hours it wrote finds every such
// loss. The difference is inserted without deduplication (a block equal
// to an earlier one must not be dropped) and with a query id the wait for
// inserts in flight looks for; a crash during it leaves either the whole
// difference or none, and the next start compares again. Keys where a
// roll-up counts more than the table (rows the table's TTL dropped before
// the roll-up's) are left as they are.
func (w *Writer) repairRollUps(ctx context.Context, t *table, tok string) error {
	for _, r := range rollUpsOf[t.name] {
		q, err := w.rollUpDifference(ctx, t, r)
		if err != nil {
			return err
		}
		var keys uint64
		if err := w.o.ClickHouse.QueryRow(ctx, "SELECT count() FROM ("+q.sel+")", t.topic, tok, t.topic, tok).Scan(&keys); err != nil {
			return fmt.Errorf("auditwriter: compare %s with %s: %w", r.target, t.name, err)
		}
		if keys == 0 {
			continue
		}
		ictx := clickhouse.Context(ctx, clickhouse.WithQueryID(w.insertQueryID(r.target)),
			clickhouse.WithSettings(clickhouse.Settings{"insert_deduplicate": 0}))
		if err := w.o.ClickHouse.Exec(ictx, q.insert, t.topic, tok, t.topic, tok); err != nil {
			return fmt.Errorf("auditwriter: repair %s: %w", r.target, err)
		}
		w.log.Warn("roll-up repaired: it lacked rows of the table's last insert that sending it again could not add",
			"table", t.name, "rollup", r.target, "keys", keys, "token", tok)
	}
	return nil
}

// difference is a roll-up's shortfall over the hours of one insert: sel
// selects it (one row per key the roll-up lacks something of), insert
// inserts it into the roll-up table. Both take four parameters: the
// table's topic and the insert's token, twice.
type difference struct{ sel, insert string }

// rollUpDifference builds the difference queries of a roll-up from the
// view's query and the roll-up table's sorting key (its keys; every other
// column is summed), as ClickHouse reports them.
func (w *Writer) rollUpDifference(ctx context.Context, t *table, r rollUp) (difference, error) {
	var asSelect, sortingKey string
	if err := w.o.ClickHouse.QueryRow(ctx, "SELECT (SELECT as_select FROM system.tables WHERE database = ? AND name = ?), "+
		"(SELECT sorting_key FROM system.tables WHERE database = ? AND name = ?)",
		w.o.Database, r.view, w.o.Database, r.target).Scan(&asSelect, &sortingKey); err != nil {
		return difference{}, fmt.Errorf("auditwriter: read the roll-up %s: %w", r.target, err)
	}
	rows, err := w.o.ClickHouse.Query(ctx, "SELECT name FROM system.columns WHERE database = ? AND table = ? ORDER BY position", w.o.Database, r.target)
	if err != nil {
		return difference{}, fmt.Errorf("auditwriter: read the columns of %s: %w", r.target, err)
	}
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return difference{}, fmt.Errorf("auditwriter: read the columns of %s: %w", r.target, err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return difference{}, fmt.Errorf("auditwriter: read the columns of %s: %w", r.target, err)
	}
	if asSelect == "" || sortingKey == "" || len(cols) == 0 {
		return difference{}, fmt.Errorf("auditwriter: the roll-up %s or its view %s is missing (run herald migrate)", r.target, r.view)
	}
	return differenceQueries(w.o.Database, t.name, r.target, asSelect, strings.Split(sortingKey, ", "), cols), nil
}

// differenceQueries are the difference queries of the roll-up target of
// table in database, filled by a view whose query is asSelect, keyed by
// keys, with columns cols.
func differenceQueries(database, table, target, asSelect string, keys, cols []string) difference {
	isKey := map[string]bool{}
	for _, k := range keys {
		isKey[k] = true
	}
	var sums []string
	for _, c := range cols {
		if !isKey[c] {
			sums = append(sums, c)
		}
	}
	q := func(s string) string { return "`" + s + "`" }
	keyList := make([]string, len(keys))
	for i, k := range keys {
		keyList[i] = q(k)
	}
	ks := strings.Join(keyList, ", ")
	var summed, diffs, notLess, more []string
	for _, s := range sums {
		summed = append(summed, "sum("+q(s)+") AS "+q(s))
		diffs = append(diffs, "e."+q(s)+" - a."+q(s))
		notLess = append(notLess, "e."+q(s)+" >= a."+q(s))
		more = append(more, "e."+q(s)+" > a."+q(s))
	}
	hours := "SELECT DISTINCT toStartOfHour(at) FROM " + q(database) + "." + q(table) + " WHERE kafka_topic = ? AND insert_token = ?"
	expected := "SELECT " + ks + ", " + strings.Join(summed, ", ") + " FROM (" + asSelect + ") WHERE hour IN (" + hours + ") GROUP BY " + ks
	actual := "SELECT " + ks + ", " + strings.Join(summed, ", ") + " FROM " + q(database) + "." + q(target) +
		" WHERE hour IN (" + hours + ") GROUP BY " + ks
	sel := "SELECT " + ks + ", " + strings.Join(diffs, ", ") + " FROM (" + expected + ") AS e LEFT JOIN (" + actual + ") AS a USING (" + ks + ")" +
		" WHERE " + strings.Join(notLess, " AND ") + " AND (" + strings.Join(more, " OR ") + ")"
	insert := "INSERT INTO " + q(database) + "." + q(target) + " (" + ks + ", " + strings.Join(quoteAll(sums), ", ") + ") " + sel
	return difference{sel: sel, insert: insert}
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return out
}
