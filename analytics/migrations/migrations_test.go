package migrations_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/testenv"
)

// auditTables must exist, with a TTL, after every migration ran.
var auditTables = []string{
	"requests", "decisions", "attempts", "outcomes", "receipts", "feed_items",
	"requests_hourly", "dedupe_hourly", "decisions_hourly", "attempts_hourly", "outcomes_hourly",
}

func connect(t *testing.T, addr string) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestStatementsAreRenderedAndSplit(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 3 {
		t.Fatalf("want at least 3 migrations, got %d", len(all))
	}
	for _, m := range all {
		t.Run("migration "+m.Name+" renders without placeholders or comments", func(t *testing.T) {
			stmts := m.Statements("herald_x", 42)
			if len(stmts) == 0 {
				t.Fatal("no statements")
			}
			for _, s := range stmts {
				if strings.Contains(s, "{{") || strings.HasSuffix(s, ";") || strings.HasPrefix(strings.TrimSpace(s), "--") {
					t.Errorf("badly rendered statement:\n%s", s)
				}
				if !strings.Contains(s, "IF NOT EXISTS") {
					t.Errorf("statement is not idempotent:\n%s", s)
				}
				if strings.HasPrefix(s, "CREATE TABLE") && !strings.Contains(s, "toIntervalDay(42)") {
					t.Errorf("table without the TTL:\n%s", s)
				}
			}
		})
	}
}

func TestValidDatabase(t *testing.T) {
	cases := []struct {
		name, db string
		ok       bool
	}{
		{"herald's own database is accepted", "herald", true},
		{"a name with digits and underscores is accepted", "herald_eu_2", true},
		{"chDB's Overlay default database is refused", "default", false},
		{"the system database is refused", "system", false},
		{"a name needing quotes is refused", "her`ald", false},
		{"an empty name is refused", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := migrations.ValidDatabase(c.db); (err == nil) != c.ok {
				t.Fatalf("ValidDatabase(%q) = %v", c.db, err)
			}
		})
	}
}

// schemaState is every table's CREATE query and modification time: equal
// states mean nothing in the database changed.
func schemaState(t *testing.T, conn driver.Conn, db string) map[string]string {
	t.Helper()
	rows, err := conn.Query(context.Background(),
		"SELECT name, create_table_query, toString(metadata_modification_time) FROM system.tables WHERE database = ?", db)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, create, mod string
		if err := rows.Scan(&name, &create, &mod); err != nil {
			t.Fatal(err)
		}
		out[name] = create + " @ " + mod
	}
	return out
}

func TestApplyingTwiceIsANoOp(t *testing.T) {
	addr, db := testenv.ClickHouseDB(t)
	conn := connect(t, addr)
	ctx := context.Background()

	var firstSteps, secondSteps [][2]int64
	first, err := migrations.Apply(ctx, conn, migrations.Options{Database: db,
		Progress: func(done, total int64) { firstSteps = append(firstSteps, [2]int64{done, total}) }})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := migrations.All()
	if len(first.Applied) != len(all) {
		t.Fatalf("first run applied %v, want all %d", first.Applied, len(all))
	}
	before := schemaState(t, conn, db)
	time.Sleep(1100 * time.Millisecond) // metadata times have one-second resolution

	second, err := migrations.Apply(ctx, conn, migrations.Options{Database: db,
		Progress: func(done, total int64) { secondSteps = append(secondSteps, [2]int64{done, total}) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("progress counts every statement of the first run and the TTL step, up to its total", func(t *testing.T) {
		want := int64(1)
		for _, m := range all {
			want += int64(len(m.Statements(db, migrations.DefaultTTLDays)))
		}
		for i, s := range firstSteps {
			if s != [2]int64{int64(i + 1), want} {
				t.Fatalf("progress call %d = %v, want [%d %d]", i, s, i+1, want)
			}
		}
		if int64(len(firstSteps)) != want {
			t.Fatalf("%d progress calls, want %d", len(firstSteps), want)
		}
		if len(secondSteps) != 1 || secondSteps[0] != [2]int64{1, 1} {
			t.Fatalf("second run's progress %v, want only the TTL step [1 1]", secondSteps)
		}
	})
	t.Run("the second run applies nothing and changes no TTL", func(t *testing.T) {
		if len(second.Applied) != 0 || len(second.TTLChanged) != 0 {
			t.Fatalf("second run = %+v", second)
		}
	})
	t.Run("the second run leaves every table as it was", func(t *testing.T) {
		after := schemaState(t, conn, db)
		if len(after) != len(before) {
			t.Fatalf("tables before %d, after %d", len(before), len(after))
		}
		for name, s := range before {
			if after[name] != s {
				t.Errorf("%s changed:\n before %s\n after  %s", name, s, after[name])
			}
		}
	})
	t.Run("every version is recorded once", func(t *testing.T) {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM `"+db+"`."+migrations.Table+" FINAL").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if int(n) != len(all) {
			t.Fatalf("%d recorded versions, want %d", n, len(all))
		}
		pending, err := migrations.Pending(ctx, conn, db)
		if err != nil || len(pending) != 0 {
			t.Fatalf("Pending = %v, %v", pending, err)
		}
	})
}

func TestEveryAuditTableHasTheConfiguredTTL(t *testing.T) {
	addr, db := testenv.ClickHouseDB(t)
	conn := connect(t, addr)
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, conn, migrations.Options{Database: db}); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, days int) {
		t.Helper()
		ttls, err := migrations.TTLs(ctx, conn, db)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, x := range ttls {
			got[x.Table] = x.Days
			if x.Days != days {
				t.Errorf("table %s: TTL %d days (%q), want %d", x.Table, x.Days, x.Expr, days)
			}
		}
		for _, name := range auditTables {
			if _, ok := got[name]; !ok {
				t.Errorf("table %s is missing", name)
			}
		}
	}
	t.Run("a fresh schema keeps the audit one year", func(t *testing.T) {
		check(t, migrations.DefaultTTLDays)
	})
	t.Run("a changed TTL is applied to every table by the next run", func(t *testing.T) {
		res, err := migrations.Apply(ctx, conn, migrations.Options{Database: db, TTLDays: 400})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Applied) != 0 || len(res.TTLChanged) != len(auditTables) {
			t.Fatalf("result %+v, want no migration and %d TTL changes", res, len(auditTables))
		}
		check(t, 400)
	})
}

func TestConcurrentRunnersAllSucceedAndAgree(t *testing.T) {
	addr, base := testenv.ClickHouseDB(t)
	conn := connect(t, addr)
	db := base + "_c" // not created yet: the runners race on the database too
	t.Cleanup(func() { conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"` SYNC") })

	const runners = 4
	var wg sync.WaitGroup
	errs := make([]error, runners)
	applied := make([][]string, runners)
	for i := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := connect(t, addr)
			res, err := migrations.Apply(context.Background(), c, migrations.Options{Database: db})
			errs[i], applied[i] = err, res.Applied
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("runner %d: %v", i, err)
		}
	}
	all, _ := migrations.All()
	list, err := migrations.List(context.Background(), conn, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(all) {
		t.Fatalf("recorded %d versions, want %d (runners applied %v)", len(list), len(all), applied)
	}
	ttls, err := migrations.TTLs(context.Background(), conn, db)
	if err != nil || len(ttls) != len(auditTables) {
		t.Fatalf("tables after concurrent runs: %v, %v", ttls, err)
	}
}

func TestAChangedAppliedMigrationIsRefused(t *testing.T) {
	addr, db := testenv.ClickHouseDB(t)
	conn := connect(t, addr)
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, conn, migrations.Options{Database: db}); err != nil {
		t.Fatal(err)
	}
	// Record version 1 as applied from other contents.
	if err := conn.Exec(ctx, "INSERT INTO `"+db+"`."+migrations.Table+" VALUES (1, 'audit_tables', 'deadbeef', now64(3), 'test')"); err != nil {
		t.Fatal(err)
	}
	_, err := migrations.Apply(ctx, conn, migrations.Options{Database: db})
	if err == nil || !strings.Contains(err.Error(), "must not change") {
		t.Fatalf("Apply = %v, want a refusal naming the changed migration", err)
	}
}
