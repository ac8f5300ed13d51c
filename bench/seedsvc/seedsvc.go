// Package seedsvc is a benchmark baseline, not part of herald: the seed
// design of a notification API written the way a user would write it in an
// afternoon, in Go with PostgreSQL, so that `scripts/bench-api --compare`
// can drive it with the same load generator (bench/apiload) beside herald
// and print both side by side (issue 32, goal 5). Nothing in herald
// imports it.
//
// It answers POST /v1/notifications with herald's request and answer
// shape (sdk.SendResult: 202, each notification's id, recipient and
// status, "accepted" or "duplicate", and the duplicates in skipped[]), so
// that `herald bench api` drives it unchanged. Per send it runs ONE
// PostgreSQL transaction: for each recipient, an insert into the sent-set
// `sends`, whose unique key is (tenant, scope, type, recipient),
//
//	INSERT INTO sends (...) VALUES (...) ON CONFLICT DO NOTHING RETURNING id
//
// and, when it returned an id (the send is new), an `outbox` row holding
// the notification (jsonb) for a relay to deliver; then COMMIT. The scope
// is the send's dedupeKey, else its idempotency key (the idempotencyKey
// member or the Idempotency-Key header), else its notification key (the
// "key" member's JSON as sent), else a random one (never a duplicate).
//
// Against herald it is simpler, and the comparison says so: the sent-set
// never expires (no dedupeWindowMs, no idempotency TTL), a replay answers
// "duplicate" instead of the original's outcome, a changed body under the
// same idempotency key is not a conflict, and nothing is audited. The
// durability is PostgreSQL's: with synchronous_commit=on (Config's pool
// decides: `scripts/bench-api.d/seedsvc --synchronous-commit`) a 202 means
// the send's WAL is flushed to disk; with off, committed in memory and
// flushed within wal_writer_delay (a crash may lose the last sends, never
// half a send).
//
// Variants (Statement): StatementTx, the explicit transaction above (BEGIN,
// the sent-set insert, the outbox insert when new, COMMIT: four round
// trips for a new send, three for a duplicate); StatementCTE, the same two
// inserts as one statement (a data-modifying WITH), one round trip and an
// implicit transaction: what a user tuning the seed design would do next.
package seedsvc

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/sdk"
)

// A notification's status in the answer, as herald's dedupe stage names
// its outcomes (sdk.NotificationStatus).
const (
	statusAccepted  = "accepted"
	statusDuplicate = "duplicate"
)

// Statement is how a send's rows are written.
type Statement string

const (
	// StatementTx: BEGIN; the sent-set insert; the outbox insert when it
	// returned an id; COMMIT.
	StatementTx Statement = "tx"
	// StatementCTE: both inserts in one statement, an implicit transaction.
	StatementCTE Statement = "cte"
)

// Config configures a Server.
type Config struct {
	// Pool is the PostgreSQL connection pool; its connections' settings
	// (synchronous_commit) are the caller's.
	Pool *pgxpool.Pool
	// Schema holds the tables (see Setup).
	Schema string
	// Keys maps the SHA-256 of each API key to its tenant (see ParseKeys).
	Keys map[[sha256.Size]byte]string
	// Statement is the write's variant; "" means StatementTx.
	Statement Statement
	// MaxBodyBytes bounds a request body; 0 means 64 KiB, as herald api.
	MaxBodyBytes int64
}

// Server answers POST /v1/notifications. It is an http.Handler.
type Server struct {
	cfg                  Config
	mux                  *http.ServeMux
	insertSend, insertOB string
	insertCTE            string
	accepted, duplicates atomic.Int64
}

// New returns a Server for cfg. The tables must exist (Setup).
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil || cfg.Schema == "" || len(cfg.Keys) == 0 {
		return nil, errors.New("seedsvc: a pool, a schema and at least one key are required")
	}
	switch cfg.Statement {
	case "":
		cfg.Statement = StatementTx
	case StatementTx, StatementCTE:
	default:
		return nil, fmt.Errorf("seedsvc: statement %q is neither %q nor %q", cfg.Statement, StatementTx, StatementCTE)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 64 << 10
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	q := pgx.Identifier{cfg.Schema}.Sanitize()
	s.insertSend = `INSERT INTO ` + q + `.sends (tenant, scope, type, recipient, notification_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (tenant, scope, type, recipient) DO NOTHING RETURNING id`
	s.insertOB = `INSERT INTO ` + q + `.outbox (send_id, notification) VALUES ($1, $2)`
	s.insertCTE = `WITH s AS (` + s.insertSend + `)
		INSERT INTO ` + q + `.outbox (send_id, notification) SELECT id, $6 FROM s RETURNING send_id`
	s.mux.HandleFunc("POST /v1/notifications", s.send)
	s.mux.HandleFunc("GET /stats", s.stats)
	return s, nil
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Stats is how many notifications were accepted (new) and answered as
// duplicates since the server started.
type Stats struct {
	Accepted   int64 `json:"accepted"`
	Duplicates int64 `json:"duplicates"`
}

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	return Stats{Accepted: s.accepted.Load(), Duplicates: s.duplicates.Load()}
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s.Stats())
}

// Setup creates the schema and its tables when missing: the sent-set
// `sends` with its unique key on the scope, and the `outbox`.
func Setup(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	q := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+q+`;
		CREATE TABLE IF NOT EXISTS `+q+`.sends (
			id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			tenant          text NOT NULL,
			scope           text NOT NULL,
			type            text NOT NULL,
			recipient       text NOT NULL,
			notification_id text NOT NULL,
			created_at      timestamptz NOT NULL DEFAULT now(),
			UNIQUE (tenant, scope, type, recipient));
		CREATE TABLE IF NOT EXISTS `+q+`.outbox (
			id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			send_id      bigint NOT NULL REFERENCES `+q+`.sends (id),
			notification jsonb NOT NULL,
			created_at   timestamptz NOT NULL DEFAULT now())`)
	if err != nil {
		return fmt.Errorf("seedsvc: create schema %s: %w", schema, err)
	}
	return nil
}

// Connect opens a pool of conns connections to dsn, every one with
// synchronous_commit set to syncCommit ("on" or "off"), and opens all of
// them before it returns, so that no PostgreSQL backend starts under load.
func Connect(ctx context.Context, dsn, syncCommit string, conns int) (*pgxpool.Pool, error) {
	if syncCommit != "on" && syncCommit != "off" {
		return nil, fmt.Errorf("seedsvc: synchronous_commit: want on or off, not %q", syncCommit)
	}
	if conns < 1 {
		return nil, fmt.Errorf("seedsvc: connections: want at least 1, not %d", conns)
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("seedsvc: postgres DSN: %w", err)
	}
	pc.MaxConns, pc.MinConns = int32(conns), int32(conns)
	pc.ConnConfig.RuntimeParams["synchronous_commit"] = syncCommit
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("seedsvc: connect: %w", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, conns)
	held := make([]*pgxpool.Conn, conns)
	for i := range conns {
		wg.Go(func() { held[i], errs[i] = pool.Acquire(ctx) })
	}
	wg.Wait()
	for _, c := range held {
		if c != nil {
			c.Release()
		}
	}
	if err := errors.Join(errs...); err != nil {
		pool.Close()
		return nil, fmt.Errorf("seedsvc: open %d connections: %w", conns, err)
	}
	return pool, nil
}

// Drop drops the schema and everything in it.
func Drop(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		return fmt.Errorf("seedsvc: drop schema %s: %w", schema, err)
	}
	return nil
}

// notification is the part of herald's send body the seed design reads.
type notification struct {
	Type           string          `json:"type"`
	RecipientID    string          `json:"recipientId"`
	Recipients     []string        `json:"recipients"`
	Title          string          `json:"title"`
	Body           string          `json:"body"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Locale         string          `json:"locale,omitempty"`
	Channels       []string        `json:"channels,omitempty"`
	DedupeKey      string          `json:"dedupeKey,omitempty"`
	DedupeWindowMs int64           `json:"dedupeWindowMs,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	Key            json.RawMessage `json:"key,omitempty"`
}

// scope is the sent-set's key for n: its dedupeKey, idempotency key,
// notification key or, lacking all three, a random one.
func (n *notification) scope(header string) string {
	switch {
	case n.DedupeKey != "":
		return "d:" + n.DedupeKey
	case n.IdempotencyKey != "":
		return "i:" + n.IdempotencyKey
	case header != "":
		return "i:" + header
	case len(n.Key) > 0:
		return "k:" + string(n.Key)
	}
	return "r:" + randomID()
}

func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	tenant, ok := s.authenticate(r)
	if !ok {
		problem(w, http.StatusUnauthorized, "a valid API key is required (Authorization: Bearer <key>)")
		return
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		problem(w, http.StatusRequestEntityTooLarge, "the body is too large or could not be read")
		return
	}
	var n notification
	if err := json.Unmarshal(b, &n); err != nil {
		problem(w, http.StatusBadRequest, "the body is not a notification: "+err.Error())
		return
	}
	recipients := n.Recipients
	if n.RecipientID != "" {
		recipients = append(recipients, n.RecipientID)
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"type", n.Type}, {"title", n.Title}, {"body", n.Body}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(recipients) == 0 {
		missing = append(missing, "recipientId")
	}
	if len(missing) > 0 {
		problem(w, http.StatusUnprocessableEntity, "required: "+strings.Join(missing, ", "))
		return
	}
	scope := n.scope(r.Header.Get("Idempotency-Key"))
	res := sdk.SendResult{RequestID: randomID(), Notifications: make([]sdk.NotificationStatus, len(recipients)),
		Deliveries: []sdk.Delivery{}, Skipped: []sdk.Skipped{}}
	for i, rcpt := range recipients {
		res.Notifications[i] = sdk.NotificationStatus{ID: notificationID(tenant, n.Type, rcpt, scope), Recipient: rcpt}
	}
	if err := s.write(r.Context(), tenant, scope, &n, b, res.Notifications); err != nil {
		problem(w, http.StatusServiceUnavailable, "the send was not written: "+err.Error())
		return
	}
	for _, st := range res.Notifications {
		if st.Status == statusDuplicate {
			res.Skipped = append(res.Skipped, sdk.Skipped{NotificationID: st.ID, Recipient: st.Recipient, Reason: st.Status})
			s.duplicates.Add(1)
		} else {
			s.accepted.Add(1)
		}
	}
	out, _ := json.Marshal(res) // strings and slices: cannot fail
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/notifications/"+res.Notifications[0].ID)
	w.WriteHeader(http.StatusAccepted)
	w.Write(append(out, '\n'))
}

// write runs the send's one transaction and sets each notification's
// status: accepted when its sent-set row is new, else duplicate.
func (s *Server) write(ctx context.Context, tenant, scope string, n *notification, body []byte, sts []sdk.NotificationStatus) error {
	if s.cfg.Statement == StatementCTE && len(sts) == 1 {
		st := &sts[0]
		var id int64
		err := s.cfg.Pool.QueryRow(ctx, s.insertCTE, tenant, scope, n.Type, st.Recipient, st.ID, body).Scan(&id)
		return setStatus(st, err)
	}
	return pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		for i := range sts {
			st := &sts[i]
			var id int64
			err := tx.QueryRow(ctx, s.insertSend, tenant, scope, n.Type, st.Recipient, st.ID).Scan(&id)
			if err := setStatus(st, err); err != nil {
				return err
			}
			if st.Status == statusAccepted {
				if _, err := tx.Exec(ctx, s.insertOB, id, body); err != nil {
					return fmt.Errorf("outbox: %w", err)
				}
			}
		}
		return nil
	})
}

// setStatus reads an insert's outcome: a row is accepted, none a
// duplicate.
func setStatus(st *sdk.NotificationStatus, err error) error {
	switch {
	case err == nil:
		st.Status = statusAccepted
	case errors.Is(err, pgx.ErrNoRows):
		st.Status = statusDuplicate
	default:
		return fmt.Errorf("sent-set: %w", err)
	}
	return nil
}

// authenticate finds the tenant of the request's "Bearer <key>".
func (s *Server) authenticate(r *http.Request) (string, bool) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "", false
	}
	tenant, ok := s.cfg.Keys[sha256.Sum256([]byte(key))]
	return tenant, ok
}

// ParseKeys reads herald's key file format, one "tenant:name:sha256hex"
// per line (blank lines and '#' comments ignored), into Config.Keys.
func ParseKeys(text string) (map[[sha256.Size]byte]string, error) {
	keys := map[[sha256.Size]byte]string{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, ":")
		var sum [sha256.Size]byte
		raw, err := hex.DecodeString(parts[len(parts)-1])
		if len(parts) != 3 || parts[0] == "" || err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("seedsvc: key file line %d: want tenant:name:sha256hex", i+1)
		}
		copy(sum[:], raw)
		keys[sum] = parts[0]
	}
	if len(keys) == 0 {
		return nil, errors.New("seedsvc: the key file holds no keys")
	}
	return keys, nil
}

// notificationID derives a notification's id from its scope, as herald
// derives one from a dedupe or idempotency key: 32 hex digits.
func notificationID(tenant, typ, recipient, scope string) string {
	h := sha256.New()
	for _, s := range []string{tenant, typ, recipient, scope} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func randomID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"status": status, "title": http.StatusText(status), "detail": detail})
}
