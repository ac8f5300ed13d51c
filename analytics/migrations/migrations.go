// Package migrations owns herald's ClickHouse schema: the versioned DDL files
// under sql/ (embedded), the runner behind `herald migrate`, and the
// herald_migrations table that records what was applied.
//
// Files are named NNNN_words.sql and applied in version order. A file holds
// statements separated by a ';' at the end of a line; {{db}} stands for the
// (back-quoted) database and {{ttl_days}} for the audit TTL in days. Every
// statement is idempotent (CREATE … IF NOT EXISTS), so applying is safe to
// run twice and concurrently: two runners racing on one version both run
// the same harmless statements and both record it, and the records collapse
// (ReplacingMergeTree on the version, read with FINAL).
//
// An applied file must never change: its checksum (of the template, so a TTL
// change does not count) is recorded, and Apply refuses to run when an
// applied file's checksum differs. Change the schema with a new file.
//
// The TTL is part of every table and reconciled on each Apply: a table whose
// TTL differs from Options.TTLDays is altered (MODIFY TTL).
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

//go:embed sql/*.sql
var files embed.FS

// Table is the name of the table that records applied migrations.
const Table = "herald_migrations"

// DefaultTTLDays keeps the audit for one year.
const DefaultTTLDays = 365

// Migration is one versioned DDL file.
type Migration struct {
	Version  int
	Name     string // file name without the version and extension
	Template string // file contents, with {{db}} and {{ttl_days}}
	Checksum string // sha256 hex of Template
}

// All returns the embedded migrations in version order.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, "sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: read embedded files: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		m, err := parseName(e.Name())
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[m.Version]; dup {
			return nil, fmt.Errorf("migrations: version %d used by %s and %s", m.Version, prev, e.Name())
		}
		seen[m.Version] = e.Name()
		b, err := files.ReadFile("sql/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", e.Name(), err)
		}
		m.Template = string(b)
		sum := sha256.Sum256(b)
		m.Checksum = hex.EncodeToString(sum[:])
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

func parseName(name string) (Migration, error) {
	m := fileName.FindStringSubmatch(name)
	if m == nil {
		return Migration{}, fmt.Errorf("migrations: file %q is not named NNNN_words.sql", name)
	}
	v, _ := strconv.Atoi(m[1]) // four digits: cannot fail
	return Migration{Version: v, Name: m[2]}, nil
}

// Statements renders the migration for a database and TTL and splits it into
// statements, comments dropped.
func (m Migration) Statements(database string, ttlDays int) []string {
	text := strings.NewReplacer("{{db}}", quoteIdent(database), "{{ttl_days}}", strconv.Itoa(ttlDays)).Replace(m.Template)
	var out []string
	var cur strings.Builder
	for line := range strings.SplitSeq(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// ValidDatabase checks that name is a plain identifier herald can create and
// quote, and not one of the server's own databases.
func ValidDatabase(name string) error {
	if !identRE.MatchString(name) {
		return fmt.Errorf("migrations: database name %q: use letters, digits and _ (not starting with a digit)", name)
	}
	switch strings.ToLower(name) {
	case "default", "system", "information_schema":
		return fmt.Errorf("migrations: database %q belongs to the server (chDB's default is an Overlay database): use herald's own, e.g. herald", name)
	}
	return nil
}

func quoteIdent(s string) string { return "`" + s + "`" }

// Options configure Apply.
type Options struct {
	Database string
	// TTLDays is the audit TTL of every table; DefaultTTLDays when 0.
	TTLDays int
	// AppliedBy is recorded with each version (host name, tool); optional.
	AppliedBy string
	Logger    *slog.Logger
	// Progress, if set, is called with the steps done and the steps of
	// the run: every statement of every pending migration, then the TTL
	// reconciliation.
	Progress func(done, total int64)
}

// Result says what Apply changed.
type Result struct {
	// Applied lists the versions this run applied, as "0001_audit_tables".
	Applied []string
	// TTLChanged lists the tables whose TTL this run altered.
	TTLChanged []string
}

// Applied is one row of the migrations table.
type Applied struct {
	Version   int
	Name      string
	Checksum  string
	AppliedAt time.Time
}

// Apply creates the database if needed and applies every embedded migration
// not yet recorded, in order, then reconciles the TTL of every table.
func Apply(ctx context.Context, conn driver.Conn, o Options) (Result, error) {
	var res Result
	if err := ValidDatabase(o.Database); err != nil {
		return res, err
	}
	if o.TTLDays == 0 {
		o.TTLDays = DefaultTTLDays
	}
	if o.TTLDays < 1 {
		return res, fmt.Errorf("migrations: TTL must be at least one day, got %d", o.TTLDays)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	all, err := All()
	if err != nil {
		return res, err
	}
	db := quoteIdent(o.Database)
	if err := checkEngine(ctx, conn, o.Database); err != nil {
		return res, err
	}
	if err := execIdempotent(ctx, conn, "CREATE DATABASE IF NOT EXISTS "+db+" ENGINE = Atomic"); err != nil {
		return res, fmt.Errorf("migrations: create database %s: %w", o.Database, err)
	}
	if err := execIdempotent(ctx, conn, `CREATE TABLE IF NOT EXISTS `+db+`.`+Table+` (
		version UInt32, name String, checksum String, applied_at DateTime64(3, 'UTC'), applied_by String
	) ENGINE = ReplacingMergeTree ORDER BY version SETTINGS non_replicated_deduplication_window = 1000`); err != nil {
		return res, fmt.Errorf("migrations: create %s.%s: %w", o.Database, Table, err)
	}
	done, err := List(ctx, conn, o.Database)
	if err != nil {
		return res, err
	}
	applied := map[int]Applied{}
	for _, a := range done {
		applied[a.Version] = a
	}
	var total, steps int64 = 1, 0
	for _, m := range all {
		if _, ok := applied[m.Version]; !ok {
			total += int64(len(m.Statements(o.Database, o.TTLDays)))
		}
	}
	step := func() {
		steps++
		if o.Progress != nil {
			o.Progress(steps, total)
		}
	}
	for _, m := range all {
		label := fmt.Sprintf("%04d_%s", m.Version, m.Name)
		if a, ok := applied[m.Version]; ok {
			if a.Checksum != m.Checksum {
				return res, fmt.Errorf("migrations: %s was applied with checksum %.12s… but the file now has %.12s…: applied migrations must not change; add a new one", label, a.Checksum, m.Checksum)
			}
			continue
		}
		for i, stmt := range m.Statements(o.Database, o.TTLDays) {
			if err := execIdempotent(ctx, conn, stmt); err != nil {
				return res, fmt.Errorf("migrations: %s statement %d: %w", label, i+1, err)
			}
			step()
		}
		// The token makes a concurrent runner's identical record a no-op
		// insert; FINAL collapses it anyway if it lands in another block.
		insCtx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
			"insert_deduplication_token": "herald-migration-" + strconv.Itoa(m.Version) + "-" + m.Checksum,
		}))
		if err := conn.Exec(insCtx, `INSERT INTO `+db+`.`+Table+` (version, name, checksum, applied_at, applied_by) VALUES (?, ?, ?, ?, ?)`,
			uint32(m.Version), m.Name, m.Checksum, time.Now().UTC(), o.AppliedBy); err != nil {
			return res, fmt.Errorf("migrations: record %s: %w", label, err)
		}
		o.Logger.Info("migration applied", "database", o.Database, "migration", label)
		res.Applied = append(res.Applied, label)
	}
	changed, err := reconcileTTL(ctx, conn, o.Database, o.TTLDays)
	if err == nil {
		step()
	}
	res.TTLChanged = changed
	for _, t := range changed {
		o.Logger.Info("table TTL changed", "database", o.Database, "table", t, "ttl_days", o.TTLDays)
	}
	return res, err
}

// checkEngine refuses a database that exists with an engine herald's tables
// cannot live in (chDB's default database is an Overlay).
func checkEngine(ctx context.Context, conn driver.Conn, database string) error {
	var engine string
	err := conn.QueryRow(ctx, "SELECT engine FROM system.databases WHERE name = ?", database).Scan(&engine)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("migrations: look up database %s: %w", database, err)
	case engine != "Atomic" && engine != "Replicated":
		return fmt.Errorf("migrations: database %s has engine %s; herald needs its own Atomic database", database, engine)
	}
	return nil
}

// Codes ClickHouse may return when two runners race on an IF NOT EXISTS.
const (
	codeTableAlreadyExists    = 57
	codeDatabaseAlreadyExists = 82
)

// execIdempotent runs an idempotent statement; an "already exists" raised by
// a concurrent runner winning the race counts as success.
func execIdempotent(ctx context.Context, conn driver.Conn, stmt string) error {
	err := conn.Exec(ctx, stmt)
	var ex *clickhouse.Exception
	if errors.As(err, &ex) && (ex.Code == codeTableAlreadyExists || ex.Code == codeDatabaseAlreadyExists) &&
		strings.Contains(strings.ToUpper(stmt[:min(len(stmt), 200)]), "IF NOT EXISTS") {
		return nil
	}
	return err
}

// List returns the recorded migrations of database, in version order; none
// when the database or the table does not exist yet.
func List(ctx context.Context, conn driver.Conn, database string) ([]Applied, error) {
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ?", database, Table).Scan(&n); err != nil {
		return nil, fmt.Errorf("migrations: look up %s.%s: %w", database, Table, err)
	}
	if n == 0 {
		return nil, nil
	}
	rows, err := conn.Query(ctx, "SELECT version, name, checksum, applied_at FROM "+quoteIdent(database)+"."+Table+" FINAL ORDER BY version")
	if err != nil {
		return nil, fmt.Errorf("migrations: read %s.%s: %w", database, Table, err)
	}
	defer rows.Close()
	var out []Applied
	for rows.Next() {
		var a Applied
		var v uint32
		if err := rows.Scan(&v, &a.Name, &a.Checksum, &a.AppliedAt); err != nil {
			return nil, fmt.Errorf("migrations: scan %s.%s: %w", database, Table, err)
		}
		a.Version = int(v)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: read %s.%s: %w", database, Table, err)
	}
	return out, nil
}

// Pending returns the embedded migrations not yet applied to database. A
// process that needs the schema (the audit writer) checks it is empty.
func Pending(ctx context.Context, conn driver.Conn, database string) ([]Migration, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	done, err := List(ctx, conn, database)
	if err != nil {
		return nil, err
	}
	have := map[int]bool{}
	for _, a := range done {
		have[a.Version] = true
	}
	var out []Migration
	for _, m := range all {
		if !have[m.Version] {
			out = append(out, m)
		}
	}
	return out, nil
}

// ttlRE finds "TTL <expr> + toIntervalDay(<n>)" in a table's CREATE query.
var ttlRE = regexp.MustCompile(`\bTTL (.+?) \+ toIntervalDay\((\d+)\)`)

// TableTTL is the TTL a table carries.
type TableTTL struct {
	Table string
	// Expr is the time expression the TTL counts from; empty if none.
	Expr string
	Days int
}

// TTLs returns the TTL of every table of database except the migrations
// table and views (materialized views store their rows in roll-up tables).
func TTLs(ctx context.Context, conn driver.Conn, database string) ([]TableTTL, error) {
	rows, err := conn.Query(ctx, `SELECT name, create_table_query FROM system.tables
		WHERE database = ? AND engine LIKE '%MergeTree' AND name != ? ORDER BY name`, database, Table)
	if err != nil {
		return nil, fmt.Errorf("migrations: list tables of %s: %w", database, err)
	}
	defer rows.Close()
	var out []TableTTL
	for rows.Next() {
		var name, create string
		if err := rows.Scan(&name, &create); err != nil {
			return nil, fmt.Errorf("migrations: scan tables of %s: %w", database, err)
		}
		t := TableTTL{Table: name}
		if m := ttlRE.FindStringSubmatch(create); m != nil {
			t.Expr = m[1]
			t.Days, _ = strconv.Atoi(m[2])
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: list tables of %s: %w", database, err)
	}
	return out, nil
}

func reconcileTTL(ctx context.Context, conn driver.Conn, database string, days int) ([]string, error) {
	ttls, err := TTLs(ctx, conn, database)
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, t := range ttls {
		if t.Expr == "" {
			return changed, fmt.Errorf("migrations: table %s.%s has no TTL of the form <time> + toIntervalDay(n)", database, t.Table)
		}
		if t.Days == days {
			continue
		}
		stmt := fmt.Sprintf("ALTER TABLE %s.%s MODIFY TTL %s + toIntervalDay(%d)", quoteIdent(database), quoteIdent(t.Table), t.Expr, days)
		if err := conn.Exec(ctx, stmt); err != nil {
			return changed, fmt.Errorf("migrations: set TTL of %s.%s: %w", database, t.Table, err)
		}
		changed = append(changed, t.Table)
	}
	return changed, nil
}
