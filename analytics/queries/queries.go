// Package queries owns the analysts' SQL: the *.sql files in this directory
// (embedded), each a single ClickHouse query over the audit tables and
// roll-ups of analytics/migrations, and a small loader that lists them and
// runs them with their parameters.
//
// Each file starts with comment lines saying what it answers and which
// parameters it takes. Parameters are ClickHouse query parameters
// ({name:Type}); times are UTC. Table names are unqualified: run the files
// with herald's database as the default one, e.g.
//
//	clickhouse client --database herald --param_until="2026-12-01 00:00:00" < hit_rate_by_type_7d.sql
package queries

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

//go:embed *.sql
var files embed.FS

// Query is one analysts' query.
type Query struct {
	// Name is the file name without .sql.
	Name string
	// Doc is the leading comment, without the comment markers.
	Doc string
	SQL string
	// Params are the query's parameters in order of first use.
	Params []Param
}

// Param is one query parameter.
type Param struct {
	Name, Type string
}

var paramRE = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*):([^}]+)\}`)

// All returns every query, sorted by name.
func All() ([]Query, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, fmt.Errorf("queries: read embedded files: %w", err)
	}
	var out []Query
	for _, e := range entries {
		b, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, fmt.Errorf("queries: read %s: %w", e.Name(), err)
		}
		out = append(out, parse(strings.TrimSuffix(e.Name(), ".sql"), string(b)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get returns the query named name.
func Get(name string) (Query, error) {
	all, err := All()
	if err != nil {
		return Query{}, err
	}
	for _, q := range all {
		if q.Name == name {
			return q, nil
		}
	}
	names := make([]string, len(all))
	for i, q := range all {
		names[i] = q.Name
	}
	return Query{}, fmt.Errorf("queries: no query named %q (have %s)", name, strings.Join(names, ", "))
}

func parse(name, text string) Query {
	q := Query{Name: name, SQL: strings.TrimSpace(text)}
	var doc []string
	for line := range strings.SplitSeq(text, "\n") {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "--") {
			break
		}
		doc = append(doc, strings.TrimSpace(strings.TrimPrefix(t, "--")))
	}
	q.Doc = strings.Join(doc, "\n")
	seen := map[string]bool{}
	for _, m := range paramRE.FindAllStringSubmatch(text, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			q.Params = append(q.Params, Param{Name: m[1], Type: m[2]})
		}
	}
	return q
}

// TenantParam is the parameter ForTenant adds: the tenant whose rows the
// narrowed query returns.
const TenantParam = "scope_tenant"

// ForTenant returns q narrowed to one tenant's rows, at most limit of them
// (no bound when limit is 0): q's SQL becomes a subquery filtered on its
// tenant column by the parameter TenantParam (String), which ClickHouse
// pushes down into the subquery. Rows keep no order: sort them. A query
// that takes a tenant parameter of its own (one tenant's report, such as
// suppressed_for_recipient) answers no tenant column and is refused: give
// it the tenant as that parameter. Every other query here answers with a
// tenant column. The API's dashboard runs its queries this way, so a
// tenant sees only its own rows whatever the query.
func (q Query) ForTenant(limit int) (Query, error) {
	for _, p := range q.Params {
		if p.Name == "tenant" {
			return Query{}, fmt.Errorf("queries: %s is one tenant's already: give the tenant as its parameter", q.Name)
		}
	}
	n := q
	n.SQL = "SELECT * FROM (\n" + q.SQL + "\n) WHERE tenant = {" + TenantParam + ":String}"
	if limit > 0 {
		n.SQL += fmt.Sprintf(" LIMIT %d", limit)
	}
	n.Params = append(append([]Param(nil), q.Params...), Param{Name: TenantParam, Type: "String"})
	return n, nil
}

// Time formats t as a DateTime('UTC') parameter value.
func Time(t time.Time) string { return t.UTC().Format(time.DateTime) }

// Run runs the query with params (every parameter is required). conn's
// default database must be herald's.
func (q Query) Run(ctx context.Context, conn driver.Conn, params map[string]string) (driver.Rows, error) {
	if err := q.check(params); err != nil {
		return nil, err
	}
	rows, err := conn.Query(clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters(params))), q.SQL)
	if err != nil {
		return nil, fmt.Errorf("queries: run %s: %w", q.Name, err)
	}
	return rows, nil
}

// Select runs the query and scans every row into dest, a pointer to a slice
// of structs with `ch` tags (as driver.Conn.Select).
func (q Query) Select(ctx context.Context, conn driver.Conn, dest any, params map[string]string) error {
	if err := q.check(params); err != nil {
		return err
	}
	if err := conn.Select(clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters(params))), dest, q.SQL); err != nil {
		return fmt.Errorf("queries: run %s: %w", q.Name, err)
	}
	return nil
}

// check reports the parameters params lacks.
func (q Query) check(params map[string]string) error {
	var missing []string
	for _, p := range q.Params {
		if _, ok := params[p.Name]; !ok {
			missing = append(missing, p.Name+" ("+p.Type+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("queries: %s needs parameters %s", q.Name, strings.Join(missing, ", "))
	}
	return nil
}
