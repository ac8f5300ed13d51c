package queries_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/heraldhq/herald/analytics/dashboard/dashboardtest"
	"github.com/heraldhq/herald/analytics/queries"
)

// TestEveryQueryNarrowedToATenantAnswersOnlyThatTenantsRows runs every
// query, narrowed with ForTenant, over two tenants' known rows: it answers
// rows of the tenant asked for and none of the other's, where the query
// unnarrowed answers both tenants' rows. A query that takes a tenant
// parameter is refused.
func TestEveryQueryNarrowedToATenantAnswersOnlyThatTenantsRows(t *testing.T) {
	db := dashboardtest.Populate(t)
	all, err := queries.All()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{
		"since": queries.Time(db.Rows.Base.Add(-24 * time.Hour)), "until": queries.Time(db.Rows.Base.Add(time.Hour)),
		"margin": "5", "max_attempts": "5", "min_decisions": "1", "min_increase": "-1", "period_hours": "2",
		"recipient": "u_1", "tenant": "acme",
	}
	// count answers the rows of the query's SQL with tenant and those of
	// other tenants.
	count := func(t *testing.T, sql string, params map[string]string) (mine, others uint64) {
		t.Helper()
		ctx := clickhouse.Context(context.Background(), clickhouse.WithParameters(clickhouse.Parameters(params)))
		q := "SELECT countIf(tenant = 'acme') AS mine, countIf(tenant != 'acme') AS others FROM (\n" + sql + "\n)"
		if err := db.Conn.QueryRow(ctx, q).Scan(&mine, &others); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
		return mine, others
	}
	// The queries whose known rows include both tenants.
	bothTenants := map[string]bool{"hit_rate_hourly": true, "decisions_by_reason": true, "attempts_by_channel": true,
		"outcomes_by_channel": true, "maybe_shown_twice": true, "ambiguous_timeout_rate": true}
	for _, q := range all {
		t.Run(q.Name+" narrowed to acme answers acme's rows only, or is refused when it takes a tenant", func(t *testing.T) {
			params := map[string]string{}
			for _, p := range q.Params {
				v, ok := values[p.Name]
				if !ok {
					t.Fatalf("no test value for parameter %s", p.Name)
				}
				params[p.Name] = v
			}
			narrowed, err := q.ForTenant(0)
			if slices.ContainsFunc(q.Params, func(p queries.Param) bool { return p.Name == "tenant" }) {
				if err == nil {
					t.Fatal("a query that takes a tenant parameter was narrowed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(narrowed.SQL, "{"+queries.TenantParam+":String}") || narrowed.Params[len(narrowed.Params)-1].Name != queries.TenantParam {
				t.Fatalf("narrowed query lacks its tenant parameter: %+v", narrowed.Params)
			}
			params[queries.TenantParam] = "acme"
			mine, others := count(t, narrowed.SQL, params)
			if others != 0 {
				t.Fatalf("%d rows of other tenants", others)
			}
			if !bothTenants[q.Name] {
				return
			}
			allMine, allOthers := count(t, q.SQL, params)
			if mine == 0 || mine != allMine || allOthers == 0 {
				t.Fatalf("narrowed: %d rows of acme; unnarrowed: %d of acme, %d of others; want acme's rows alone", mine, allMine, allOthers)
			}
		})
	}
	t.Run("a limit bounds the narrowed rows", func(t *testing.T) {
		q, err := queries.Get("decisions_by_reason")
		if err != nil {
			t.Fatal(err)
		}
		params := map[string]string{"since": values["since"], "until": values["until"], queries.TenantParam: "acme"}
		n, err := q.ForTenant(2)
		if err != nil {
			t.Fatal(err)
		}
		if mine, _ := count(t, n.SQL, params); mine != 2 {
			t.Fatalf("%d rows with limit 2", mine)
		}
	})
}
