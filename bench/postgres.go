package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/schemas"
)

// PostgresOptions configure the seed design's backend: a PostgreSQL table
// `sends` with a unique key on the dedupe scope, one
// `insert … on conflict do nothing returning id` per request; a returned id
// means accepted.
type PostgresOptions struct {
	// DSN is a libpq connection string or URL.
	DSN string
	// Batch is the number of statements per round trip of the batched
	// variant, and of rows per statement of the unnest variant, 1000 by
	// default. pgx sends a batch as one pipeline ending in one Sync, so
	// each batch is one implicit transaction (one commit); each unnest
	// statement is one too.
	Batch int
	// Conns is the number of connections, 1 by default: the stream is split
	// among them by dedupe scope and they insert concurrently.
	Conns  int
	Logger *slog.Logger
}

// PostgresBackend is the name of the PostgreSQL rows.
const PostgresBackend = "postgres"

// RunPostgres measures the seed design on s: one statement per round trip,
// then pgx batches of one statement per request, then one statement per
// Batch requests (their columns as arrays, unnested into rows). Each variant starts from an empty table, in a schema of
// its own that is dropped afterwards. Timing starts with every connection
// open and ends with the last reply.
func RunPostgres(ctx context.Context, s *Stream, o PostgresOptions) ([]Row, error) {
	if o.DSN == "" {
		return nil, errors.New("bench: postgres: DSN is required")
	}
	if o.Batch <= 0 {
		o.Batch = 1000
	}
	if o.Conns <= 0 {
		o.Conns = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	admin, err := pgx.Connect(ctx, o.DSN)
	if err != nil {
		return nil, fmt.Errorf("bench: postgres: connect: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	schema := "herald_bench_" + randomHex(4)
	table := schema + ".sends"
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, fmt.Errorf("bench: postgres: create schema %s: %w", schema, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(cctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			o.Logger.Warn("dropping the benchmark schema failed", "backend", PostgresBackend, "schema", schema, "err", err)
		}
	}()
	_, err = admin.Exec(ctx, `CREATE TABLE `+table+` (
		id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		tenant          text   NOT NULL,
		type            text   NOT NULL,
		recipient       text   NOT NULL,
		dedupe_key      text   NOT NULL,
		notification_id text   NOT NULL,
		request_id      text   NOT NULL,
		idempotency_key text,
		title           text   NOT NULL,
		body            text   NOT NULL,
		payload         jsonb,
		created_at      bigint NOT NULL,
		UNIQUE (tenant, type, recipient, dedupe_key)
	)`)
	if err != nil {
		return nil, fmt.Errorf("bench: postgres: create table %s: %w", table, err)
	}
	insert := `INSERT INTO ` + table + ` (tenant, type, recipient, dedupe_key, notification_id, request_id, idempotency_key, title, body, payload, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (tenant, type, recipient, dedupe_key) DO NOTHING RETURNING id`
	args := func(r schemas.Request) []any {
		var payload any
		if len(r.Payload) > 0 {
			payload = string(r.Payload)
		}
		return []any{r.Tenant, r.Type, r.Recipient, r.DedupeKey, r.NotificationID, r.RequestID, r.IdempotencyKey, r.Title, r.Body, payload, r.CreatedAt}
	}
	// accepted scans one insert's reply: an id, or no row for a repeat.
	accepted := func(row pgx.Row) (int, error) {
		var id int64
		switch err := row.Scan(&id); {
		case err == nil:
			return 1, nil
		case errors.Is(err, pgx.ErrNoRows):
			return 0, nil
		default:
			return 0, err
		}
	}
	// unnest inserts a whole chunk in one statement: one array per column,
	// unnested into rows. A repeat of a dedupe scope inside the chunk
	// conflicts with the row inserted before it by the same statement and
	// is skipped, so each row returned is one accepted notification.
	unnest := `INSERT INTO ` + table + ` (tenant, type, recipient, dedupe_key, notification_id, request_id, idempotency_key, title, body, payload, created_at)
		SELECT t, ty, r, dk, n, rq, ik, ti, b, p::jsonb, c
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bigint[])
			AS u(t, ty, r, dk, n, rq, ik, ti, b, p, c)
		ON CONFLICT (tenant, type, recipient, dedupe_key) DO NOTHING RETURNING id`
	columns := func(part []schemas.Request) []any {
		var tenant, typ, recipient, dedupeKey, notification, request, idem, title, body []string
		payload := make([]*string, len(part))
		created := make([]int64, len(part))
		for i, r := range part {
			tenant, typ, recipient = append(tenant, r.Tenant), append(typ, r.Type), append(recipient, r.Recipient)
			dedupeKey, notification, request = append(dedupeKey, r.DedupeKey), append(notification, r.NotificationID), append(request, r.RequestID)
			idem, title, body = append(idem, r.IdempotencyKey), append(title, r.Title), append(body, r.Body)
			if len(r.Payload) > 0 {
				p := string(r.Payload)
				payload[i] = &p
			}
			created[i] = r.CreatedAt
		}
		return []any{tenant, typ, recipient, dedupeKey, notification, request, idem, title, body, payload, created}
	}
	variants := []struct {
		name, note string
		work       func(ctx context.Context, conn *pgx.Conn, reqs []schemas.Request) (int, error)
	}{
		{"insert on conflict, 1 per round trip", "1 commit per request", func(ctx context.Context, conn *pgx.Conn, reqs []schemas.Request) (int, error) {
			n := 0
			for _, r := range reqs {
				a, err := accepted(conn.QueryRow(ctx, insert, args(r)...))
				if err != nil {
					return n, fmt.Errorf("insert request %s: %w", r.RequestID, err)
				}
				n += a
			}
			return n, nil
		}},
		{fmt.Sprintf("insert on conflict, pgx.Batch of %d", o.Batch), "1 commit per batch", func(ctx context.Context, conn *pgx.Conn, reqs []schemas.Request) (int, error) {
			n := 0
			err := chunks(reqs, o.Batch, func(part []schemas.Request) error {
				b := &pgx.Batch{}
				for _, r := range part {
					b.Queue(insert, args(r)...)
				}
				br := conn.SendBatch(ctx, b)
				for _, r := range part {
					a, err := accepted(br.QueryRow())
					if err != nil {
						br.Close()
						return fmt.Errorf("batched insert of request %s: %w", r.RequestID, err)
					}
					n += a
				}
				if err := br.Close(); err != nil {
					return fmt.Errorf("end batch: %w", err)
				}
				return nil
			})
			return n, err
		}},
		{fmt.Sprintf("insert select from unnest on conflict, %d rows per statement", o.Batch), "1 commit per statement", func(ctx context.Context, conn *pgx.Conn, reqs []schemas.Request) (int, error) {
			n := 0
			err := chunks(reqs, o.Batch, func(part []schemas.Request) error {
				rows, err := conn.Query(ctx, unnest, columns(part)...)
				if err != nil {
					return fmt.Errorf("insert %d requests from arrays: %w", len(part), err)
				}
				for rows.Next() {
					n++
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return fmt.Errorf("insert %d requests from arrays: %w", len(part), err)
				}
				return nil
			})
			return n, err
		}},
	}

	durability, err := postgresDurability(ctx, admin)
	if err != nil {
		return nil, err
	}
	shards := shard(s.Requests, o.Conns)
	meter := o.meter()
	var rows []Row
	for _, v := range variants {
		if _, err := admin.Exec(ctx, "TRUNCATE "+table+" RESTART IDENTITY"); err != nil {
			return rows, fmt.Errorf("bench: postgres: truncate %s: %w", table, err)
		}
		row, err := postgresVariant(ctx, o, meter, shards, len(s.Requests), v.name, v.work)
		if err != nil {
			return rows, err
		}
		row.Note = v.note + "; " + durability
		var stored int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&stored); err != nil {
			return rows, fmt.Errorf("bench: postgres: count %s: %w", table, err)
		}
		rows = append(rows, row)
		if stored != row.Accepted {
			return rows, fmt.Errorf("bench: postgres: %s: %d ids returned but %d rows stored", v.name, row.Accepted, stored)
		}
		o.Logger.Info("stream decided", "backend", PostgresBackend, "variant", v.name, "elapsed", row.Elapsed.Round(time.Millisecond), "accepted", row.Accepted)
	}
	return rows, nil
}

// meter measures this process and the PostgreSQL server when it listens
// on this machine over TCP.
func (o PostgresOptions) meter() cpuMeter {
	cfg, err := pgx.ParseConfig(o.DSN)
	if err != nil {
		return cpuMeter{}
	}
	return newCPUMeter(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
}

func postgresVariant(ctx context.Context, o PostgresOptions, meter cpuMeter, shards [][]schemas.Request, n int, name string,
	work func(ctx context.Context, conn *pgx.Conn, reqs []schemas.Request) (int, error)) (Row, error) {
	conns := make([]*pgx.Conn, len(shards))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	for i := range conns {
		c, err := pgx.Connect(ctx, o.DSN)
		if err != nil {
			return Row{}, fmt.Errorf("bench: postgres: connect: %w", err)
		}
		conns[i] = c
	}
	accepted, sp, err := timed(ctx, meter, shards, func(ctx context.Context, i int, reqs []schemas.Request) (int, error) {
		return work(ctx, conns[i], reqs)
	})
	if err != nil {
		return Row{}, fmt.Errorf("bench: postgres: %s: %w", name, err)
	}
	return Row{Backend: PostgresBackend, Variant: name + connsNote(len(shards)), Records: n, Accepted: accepted, Decisions: n,
		Elapsed: sp.elapsed, CPU: sp.cpu, ServerCPU: sp.serverCPU}, nil
}

// postgresDurability names the settings that decide what a commit waits
// for, e.g. "fsync on, synchronous_commit on".
func postgresDurability(ctx context.Context, conn *pgx.Conn) (string, error) {
	var parts []string
	for _, name := range []string{"fsync", "synchronous_commit"} {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return "", fmt.Errorf("bench: postgres: show %s: %w", name, err)
		}
		parts = append(parts, name+" "+v)
	}
	return strings.Join(parts, ", "), nil
}
