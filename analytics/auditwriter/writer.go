// Package auditwriter owns the audit writer: the process that copies every
// record of herald's requests, decisions, attempts, outcomes and receipts
// topics, and of the in-app feed (herald.feed: the API's feed endpoints
// read a recipient's items there), into ClickHouse (the tables of
// analytics/migrations), exactly once, in large batches. The feed_items
// table's merges keep each item's last row (ReplacingMergeTree, see its
// migration): the latest offset of its key, so a partition's highest
// stored offset, which the writer resumes after, is never merged away.
//
// Exactly once, without a consumer group:
//   - Each topic has its own table, and each row carries its record's
//     position (kafka_topic, kafka_partition, kafka_offset). On start the
//     writer asks ClickHouse for the highest offset stored per partition and
//     consumes from the next one; nothing is committed to Kafka. What
//     ClickHouse holds is the only progress there is, so it cannot disagree
//     with the data.
//   - Each insert is one INSERT of one table and of one month, the table's
//     PARTITION BY: ClickHouse commits a part per partition, each on its
//     own, so an INSERT over two months could leave the later month's rows
//     stored and the earlier month's lost below the offsets the writer
//     resumes after. A record of another month than the batch's closes the
//     batch. An insert holds, for every Kafka partition, a run of records
//     that directly follows what the table already holds, and a table's
//     inserts run one at a time, in order; after a failed one, none of the
//     session's later inserts runs. A client that dies during an INSERT
//     leaves nothing of it: the server squashes what it receives into one
//     block until min_insert_block_size_rows or _bytes (a batch stays below
//     both: at most 1M rows and 64 MiB of values) and commits that block's
//     one part at the end of the INSERT. (Were an INSERT ever committed in
//     pieces, the pieces would still be a prefix of its rows, which are in
//     offset order within each partition.) So the stored offsets of every
//     partition are always a prefix of the log, and resuming after the
//     highest one neither skips nor repeats a record.
//   - An INSERT whose client died may still be running on the server: the
//     client can be killed after sending the data, and the server then
//     completes it. Reading the offsets before it ends would resume below it
//     and write its records twice. So every insert carries a query id with
//     the prefix herald-audit-<database>-, and the writer, before it reads
//     the offsets, waits until system.processes lists no such query. (On a
//     cluster, point the writer at one server: system.processes is per
//     server.)
//   - Each insert carries an insert_deduplication_token: the batch's
//     (derived from the table, the month and the offsets), "-" and a random
//     suffix of the insert's own. A failed insert is retried with the same
//     rows and, when the table holds rows with its token (it did land, its
//     answer was lost), the same token, so it is not written again (the
//     tables and their roll-ups keep a non-replicated deduplication window
//     for this); when the table holds none, with a new suffix: a server
//     killed between appending the block's id to the table's deduplication
//     log and renaming its part into place keeps the id without the rows,
//     and would drop a retry with that token (while feeding the views)
//     and so lose its rows below the resume point. The random suffix keeps
//     a later session's batch of the same records, made after such a crash,
//     from the same fate (insertRetrying, storedUnder). After the retries
//     the writer starts over from what ClickHouse holds.
//   - The roll-ups (the hourly tables the materialized views of migration
//     0002 fill) are exact too. A ClickHouse server that dies during an
//     INSERT can have committed the table's part and not yet its views'
//     parts: ClickHouse commits them one after the other
//     (ClickHouse#104661). The writer, resuming after the rows the table
//     holds, would never insert them again, and the roll-ups would lack
//     them for good (the outage test in cmd/herald saw 16 to 35 of about
//     9,000 decisions missing before this). So every row keeps its insert's
//     token (insert_token, migration 0006), and every session, before it
//     reads the offsets, sends each table's last INSERT again: the same
//     records, read again from Kafka, as the same batch with the same token
//     (resendLastInsert). The table drops it as a duplicate; each roll-up
//     checks the token itself (deduplicate_blocks_in_dependent_materialized_views=1,
//     set on every insert, and the roll-up's own deduplication window) and
//     stores the block's aggregate if it lacks it, drops it if it has it.
//     Only the last INSERT of a table can lack its roll-ups, since a table's
//     inserts run one at a time and none after a failed one; only it is sent
//     again, since one sent after more than 1000 later blocks would be out
//     of the window and counted twice.
//     One crash state the resend cannot repair: a MergeTree table commits
//     a part by appending the block's id to its deduplication log (a
//     write that survives a SIGKILL) and then renaming the part into
//     place. A server killed between the two keeps the id without the
//     part; a roll-up in that state drops the resend as a duplicate of the
//     part it never committed (the outage test once ended 300 of 301 in
//     attempts_hourly this way). So after the resend each roll-up is
//     compared with its table over the hours the last insert wrote, and
//     what it lacks is inserted into the roll-up table itself, without
//     deduplication (repairRollUps;
//     TestARollUpWhoseDeduplicationRecordOutlivedItsPartIsRepaired makes
//     that state on chDB). At session start no insert runs, so the
//     comparison is exact; a crash during the repair leaves all of it or
//     none, and the next start compares again. This also repairs a last
//     insert that cannot be sent again (its records gone from Kafka).
//     Why this design: it repairs only what a crash can break, with
//     ClickHouse's own deduplication, in one insert per table per session,
//     and inserts a difference only where that cannot; the comparison
//     reads the table's rows of the last insert's hours (the month's
//     partition), once per roll-up per session start. Rebuilding those
//     hours from the tables (delete and insert) would need a mutation on
//     every start and is not atomic: a crash between the delete and the
//     insert loses whole hours, which then need a repair of their own;
//     inserting only a positive difference needs neither. Roll-ups keyed
//     for replacement by hour would have to be recomputed from the tables
//     for every hour on every insert, not summed.
//     The rows are read again from Kafka, not with INSERT … SELECT from the
//     table: ClickHouse 26.7 gives rows read back in more than one chunk
//     (seen with more than 65 409 rows, one read block) a block id other
//     than the INSERT's, so the table would store them twice. With the setting off, 26.7
//     counts a repeated block in every roll-up again.
//   - The tables are ReplacingMergeTree keyed by position as well: a safety
//     net if two writers are ever pointed at one database by mistake. Run one
//     writer per database.
//
// Records are read read_committed, so aborted stage transactions never reach
// the audit. A record that does not decode is stored as a row with
// decode_error and its raw value, so counts always match the topics. A
// record whose time is already older than the table's TTL is dropped by
// ClickHouse as it lands.
//
// Hazards: a topic deleted and re-created under the same name restarts its
// offsets at zero, below what the table holds; the writer would skip its
// records. Records that Kafka's retention deleted before the writer read them
// are gone (the writer then starts at the log start). The roll-ups of a
// last insert whose rows the table's TTL dropped cannot be repaired.
// Rows written before migration 0006 have no token: the first start after
// it repairs nothing. Partitions added to a topic while the writer runs are picked
// up at its next restart. Rows whose months alternate within a Kafka
// partition (producers' clocks apart around the turn of a month) cost one
// insert per change of month.
package auditwriter

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/ops"
	"github.com/heraldhq/herald/internal/reply"
	"github.com/heraldhq/herald/topics"
)

// Options configure the audit writer.
type Options struct {
	Brokers []string
	Catalog *topics.Catalog
	// ClickHouse is a native-protocol connection; Database holds herald's
	// tables (herald migrate creates them).
	ClickHouse driver.Conn
	Database   string
	// BatchRows is the most rows of one insert (50 000 by default, at most
	// 1 000 000); FlushInterval the longest a row waits for its insert (1 s
	// by default). Under load every table gets about one insert per
	// FlushInterval.
	BatchRows     int
	FlushInterval time.Duration
	// InsertRetries is how often a failed insert is retried, with the same
	// token, before the writer starts over from ClickHouse (3 by default).
	InsertRetries int
	// ClientOpts are appended to the Kafka client's options (on kfake, set
	// FetchMaxBytes to at least partitions × FetchMaxPartitionBytes: see
	// DESIGN.md, kfake defect 1).
	ClientOpts []kgo.Opt
	Logger     *slog.Logger
	Metrics    *metrics.Registry
}

// table is one topic and the table its records go to. Each table has its
// own inserter goroutine, so the tables' inserts overlap each other and the
// decoding of the next batch; a table's own inserts stay one at a time and
// in offset order, which the resume rule depends on.
type table struct {
	name     string // table name
	topic    string
	newBatch func() batch

	cur   batch     // being filled by the poll loop
	first time.Time // when cur's oldest row arrived
	bytes int       // record values in cur
	free  chan batch
	work  chan batch

	rows, inserts, retries *metrics.Counter
	batchRows              *metrics.Histogram
}

// maxBatchRows and maxBatchBytes keep a batch below ClickHouse's
// min_insert_block_size_rows (1 048 449) and min_insert_block_size_bytes
// (256 MiB), so an INSERT is squashed into one block and committed at its
// end, never in pieces.
const (
	maxBatchRows  = 1_000_000
	maxBatchBytes = 64 << 20
)

// Writer runs the audit writer.
type Writer struct {
	o      Options
	log    *slog.Logger
	tables []*table
	byName map[string]*table // by topic
	errs   *metrics.Counter
	lag    *metrics.Lag
	// connected is true while a session reads Kafka with its offsets
	// resumed from ClickHouse (Ready).
	connected atomic.Bool
	// client is the session's Kafka client, which kafka asks through.
	client atomic.Pointer[kgo.Client]
	kafka  ops.KafkaProbe

	// insertBatch is w.insert; resendLast w.resendLastInsert; inFlight counts the inserts in flight
	// (w.inFlightInserts); holds whether the table holds rows with a token
	// (w.storedUnder); repair makes a table's roll-ups count the hours of
	// its last insert as the table does (w.repairRollUps); stored reads
	// the highest offsets a table holds (w.storedOffsets); lastToken the token of a table's last insert, ""
	// when no row has one (w.lastInsertToken); spans the first and last
	// offsets per partition of the rows an insert wrote (w.insertSpans);
	// retryPause is the pause before the first retry of an insert, doubled
	// for each next one; pollEvery the pause between looks for inserts in
	// flight; restartPause the first pause before a session starts over.
	// Tests replace them.
	insertBatch func(ctx context.Context, table string, b batch, tok string) error
	resendLast  func(ctx context.Context, t *table) error
	repair      func(ctx context.Context, t *table, tok string) error
	holds       func(ctx context.Context, t *table, tok string) (bool, error)
	inFlight    func(ctx context.Context) (uint64, error)
	stored      func(ctx context.Context, t *table) (map[int32]int64, error)
	lastToken   func(ctx context.Context, t *table) (string, error)
	spans       func(ctx context.Context, t *table, tok string) (map[int32][2]int64, error)
	retryPause  time.Duration
	// maxBatchBytes is maxBatchBytes (tests make it small).
	maxBatchBytes int
	pollEvery     time.Duration
	restartPause  time.Duration
	// beforeSend, if set, runs in each insert once its rows are ready to
	// send (tests inject network faults there).
	beforeSend func(table string)
}

// New checks the options; Run checks that the database is migrated.
func New(o Options) (*Writer, error) {
	if len(o.Brokers) == 0 || o.Catalog == nil || o.ClickHouse == nil {
		return nil, errors.New("auditwriter: Brokers, Catalog and ClickHouse are required")
	}
	if err := migrations.ValidDatabase(o.Database); err != nil {
		return nil, fmt.Errorf("auditwriter: %w", err)
	}
	if o.BatchRows <= 0 {
		o.BatchRows = 50_000
	}
	o.BatchRows = min(o.BatchRows, maxBatchRows)
	if o.FlushInterval <= 0 {
		o.FlushInterval = time.Second
	}
	if o.InsertRetries <= 0 {
		o.InsertRetries = 3
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = metrics.Default
	}
	w := &Writer{o: o, log: o.Logger.With("component", "audit-writer", "database", o.Database), byName: map[string]*table{},
		retryPause: 500 * time.Millisecond, pollEvery: 100 * time.Millisecond, restartPause: time.Second,
		maxBatchBytes: maxBatchBytes}
	w.insertBatch, w.resendLast, w.inFlight, w.stored = w.insert, w.resendLastInsert, w.inFlightInserts, w.storedOffsets
	w.lastToken, w.spans, w.repair, w.holds = w.lastInsertToken, w.insertSpans, w.repairRollUps, w.storedUnder
	w.kafka.Client = w.client.Load
	add := func(name, short string, newBatch func() batch) {
		t := &table{name: name, topic: o.Catalog.Name(short), newBatch: newBatch}
		t.rows = o.Metrics.Counter("herald_audit_rows_total", "rows inserted into ClickHouse", "table", name)
		t.inserts = o.Metrics.Counter("herald_audit_inserts_total", "inserts into ClickHouse", "table", name)
		t.retries = o.Metrics.Counter("herald_audit_insert_retries_total", "inserts retried with their deduplication token", "table", name)
		t.batchRows = o.Metrics.Histogram("herald_audit_batch_rows", "rows per insert into ClickHouse", metrics.SizeBuckets, "table", name)
		w.tables = append(w.tables, t)
		w.byName[t.topic] = t
	}
	for _, t := range auditTables {
		add(t.name, t.short, t.newBatch)
	}
	w.lag = metrics.ConsumerLag(o.Metrics, "audit-writer")
	w.errs = o.Metrics.Counter("herald_audit_restarts_total", "times the writer started over from ClickHouse after an error")
	return w, nil
}

// Run writes until ctx is done. Errors from Kafka or ClickHouse make the
// writer start over from what ClickHouse holds, with backoff; only a schema
// that is not migrated, or cannot be checked, ends Run with an error. A
// stop (ctx done) is never an error, also while the schema is checked.
func (w *Writer) Run(ctx context.Context) error {
	pending, err := migrations.Pending(ctx, w.o.ClickHouse, w.o.Database)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it began: nothing was written, nothing is lost
		}
		return fmt.Errorf("auditwriter: check schema: %w", err)
	}
	if err := notMigrated(w.o.Database, pending); err != nil {
		return err
	}
	defer func() {
		args := []any{}
		for _, t := range w.tables {
			args = append(args, t.name, t.rows.Value())
		}
		w.log.Info("audit writer stopped; rows inserted since the process started", args...)
	}()
	w.sessions(ctx)
	return nil
}

// notMigrated refuses a database with migrations still pending: the writer
// would insert into tables that lack columns or do not exist.
func notMigrated(database string, pending []migrations.Migration) error {
	if len(pending) > 0 {
		return fmt.Errorf("auditwriter: database %s lacks %d migration(s) (first: %04d_%s): run herald migrate",
			database, len(pending), pending[0].Version, pending[0].Name)
	}
	return nil
}

// sessions runs sessions until ctx is done, each after the previous one
// failed, with backoff.
func (w *Writer) sessions(ctx context.Context) {
	var backoff time.Duration
	for {
		started := time.Now()
		err := w.session(ctx)
		if ctx.Err() != nil {
			return
		}
		w.errs.Inc()
		backoff = restartPause(w.restartPause, backoff, time.Since(started))
		w.log.Error("audit writer starting over from ClickHouse", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// restartPause is the pause before the next session: first after the
// first failure, doubled after each session that failed within a minute
// (up to 30 s), first again after one that ran longer (prev is the last
// pause, 0 before any).
func restartPause(first, prev, ran time.Duration) time.Duration {
	if prev == 0 || ran > time.Minute {
		return first
	}
	return min(2*prev, 30*time.Second)
}

// Ready reports whether the writer is connected: a session has resumed
// its offsets from ClickHouse and reads Kafka, has not failed since, and a
// broker answers.
func (w *Writer) Ready() bool { return w.connected.Load() && w.kafka.Ready() }

// Run builds a writer and runs it until ctx is done.
func Run(ctx context.Context, o Options) error {
	w, err := New(o)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// session resumes every partition after the highest offset ClickHouse holds
// and copies records until ctx is done or an error. It returns only once
// every insert it started has ended, so the next session reads offsets that
// no insert in flight can still change.
func (w *Writer) session(ctx context.Context) (err error) {
	if err := w.awaitInFlightInserts(ctx); err != nil {
		return err
	}
	start, err := w.resumeOffsets(ctx)
	if err != nil {
		return err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(w.o.Brokers...),
		kgo.ConsumePartitions(start),
		// A stored position below the log start (retention deleted records
		// the writer never read) resumes at the log start.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}
	opts = append(opts, w.o.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("auditwriter: kafka client: %w", err)
	}
	defer cl.Close()
	w.client.Store(cl)
	defer w.client.Store(nil)

	errc, stop := w.startInserters(ctx)
	defer stop()
	w.connected.Store(true)
	defer w.connected.Store(false)

	for {
		select {
		case err := <-errc:
			return err
		default:
		}
		pollCtx, cancel := context.WithDeadline(ctx, w.nextDeadline())
		fetches := cl.PollRecords(pollCtx, w.o.BatchRows)
		cancel()
		if ctx.Err() != nil {
			return w.drain(errc)
		}
		var ferr error
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			if _, loss := errors.AsType[*kgo.ErrDataLoss](err); loss {
				w.log.Warn("records lost before the audit writer read them", "topic", topic, "partition", p, "err", err)
				return
			}
			if ferr == nil {
				ferr = fmt.Errorf("auditwriter: fetch %s/%d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		w.lag.Observe(fetches)
		now := time.Now()
		for _, r := range fetches.Records() {
			if reply.IsExplain(r) {
				continue // a dry run, answered by the dedupe stage, not a request
			}
			if err := w.addRecord(w.byName[r.Topic], r, now, errc); err != nil {
				return err
			}
		}
		for _, t := range w.tables {
			if w.due(t, now) {
				if err := w.handOff(t, errc); err != nil {
					return err
				}
			}
		}
	}
}

// due reports whether the table's current batch is to be inserted at now:
// it holds rows and the oldest has waited FlushInterval.
func (w *Writer) due(t *table, now time.Time) bool {
	return t.cur.len() > 0 && now.Sub(t.first) >= w.o.FlushInterval
}

// addRecord adds r to its table's current batch. A record of another month
// than the batch's hands the batch off first, so every INSERT writes one
// partition: ClickHouse commits one part per partition, each on its own,
// and an INSERT over two could leave the later month's rows stored and the
// earlier month's lost, below the offsets the writer resumes after. Cutting
// at a change of month keeps the batches, and so what is stored, in offset
// order within every Kafka partition. Rows whose months alternate within a
// partition cost one insert per change; herald's record times grow with
// the offsets but for producers' clock skew, so that happens around the
// turn of a month only.
func (w *Writer) addRecord(t *table, r *kgo.Record, now time.Time, errc <-chan error) error {
	if m := t.cur.load(r); t.cur.len() > 0 && m != t.cur.month() {
		if err := w.handOff(t, errc); err != nil {
			return err
		}
		t.cur.load(r) // decoded again, at a change of month only
	}
	if t.cur.len() == 0 {
		t.first = now
	}
	t.cur.keep()
	t.bytes += len(r.Value)
	if t.cur.len() >= w.o.BatchRows || t.bytes >= w.maxBatchBytes {
		return w.handOff(t, errc)
	}
	return nil
}

// startInserters starts one inserter per table, each with an empty current
// batch; the inserters report a failed insert on errc. stop hands them no
// more batches and waits until their inserts have ended.
func (w *Writer) startInserters(ctx context.Context) (errc chan error, stop func()) {
	errc = make(chan error, len(w.tables))
	var wg sync.WaitGroup
	for _, t := range w.tables {
		t.free, t.work = make(chan batch, 2), make(chan batch)
		t.free <- t.newBatch()
		t.cur, t.first, t.bytes = t.newBatch(), time.Time{}, 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.inserter(ctx, t, errc)
		}()
	}
	return errc, func() {
		for _, t := range w.tables {
			close(t.work)
		}
		wg.Wait()
	}
}

// handOff gives the table's current batch to its inserter (waiting while
// the previous insert of that table runs) and takes an empty one.
func (w *Writer) handOff(t *table, errc <-chan error) error {
	select {
	case t.work <- t.cur:
	case err := <-errc:
		return err
	}
	select {
	case t.cur = <-t.free:
	case err := <-errc:
		return err
	}
	t.first, t.bytes = time.Time{}, 0
	return nil
}

// drain hands the pending rows to the inserters when ctx ends; the session
// then waits for them.
func (w *Writer) drain(errc <-chan error) error {
	for _, t := range w.tables {
		if t.cur.len() > 0 {
			if err := w.handOff(t, errc); err != nil {
				w.log.Warn("pending rows not written at shutdown; the next start reads them again", "err", err)
				return nil
			}
		}
	}
	return nil
}

// inserter inserts the table's batches one at a time, in order. After a
// failure it inserts nothing more (a later batch landing before an earlier
// one would break the resume rule) and only recycles batches until the
// session ends.
func (w *Writer) inserter(ctx context.Context, t *table, errc chan<- error) {
	failed := false
	for b := range t.work {
		if !failed {
			if err := w.flush(ctx, t, b); err != nil {
				failed = true
				errc <- err
			}
		}
		b.reset()
		t.free <- b
	}
}

// nextDeadline is when the oldest pending row is due, at most one
// FlushInterval away.
func (w *Writer) nextDeadline() time.Time {
	d := time.Now().Add(w.o.FlushInterval)
	for _, t := range w.tables {
		if t.cur.len() > 0 {
			if due := t.first.Add(w.o.FlushInterval); due.Before(d) {
				d = due
			}
		}
	}
	return d
}

// insertTimeout bounds one insert attempt.
const insertTimeout = time.Minute

// flush inserts a batch as one block, retrying with the same deduplication
// token. An insert under way is finished even when ctx is cancelled
// (shutdown), so a stop never wastes a batch. Each attempt is logged at
// debug level when it starts and when it ends (the kill test uses these
// lines to know that a kill landed during an insert).
func (w *Writer) flush(ctx context.Context, t *table, b batch) error {
	n := b.len()
	started := time.Now()
	base := token(t.name, b)
	fresh := func() string { return base + "-" + randomHex() }
	if err := w.insertRetrying(context.WithoutCancel(ctx), t, b, fresh(), fresh); err != nil {
		return fmt.Errorf("auditwriter: insert %d rows into %s: %w", n, t.name, err)
	}
	t.rows.Add(int64(n))
	t.inserts.Inc()
	t.batchRows.Observe(float64(n))
	w.log.Debug("inserted", "table", t.name, "rows", n, "took", time.Since(started).Round(time.Millisecond))
	return nil
}

// insertRetrying sends b into t's table with token tok, and a failed
// attempt again, InsertRetries times, after a pause that doubles each time
// (retryPause first); it returns the last attempt's error. Each attempt is
// bounded by insertTimeout; a pause ends early, with the last error, when
// ctx ends.
//
// A retry keeps the token when the table holds rows with it (the attempt
// landed and its answer was lost: the table drops the retry, and a roll-up
// that lacks the block stores it). Otherwise, when fresh is not nil, the
// retry takes a new token from fresh: a server that died between
// appending the block's id to the table's deduplication log and renaming
// its part into place keeps the id without the rows, and would drop a
// retry with that token as a duplicate, losing its rows below the offsets
// the writer resumes after (while its materialized views, which ClickHouse
// feeds a dropped block too, would count them). Whether the table holds
// the rows is asked once no insert of the table runs on the server
// (storedUnder). The resend of a last insert (fresh nil) keeps its token:
// its rows are stored.
func (w *Writer) insertRetrying(ctx context.Context, t *table, b batch, tok string, fresh func() string) error {
	var err error
	pause := w.retryPause
	for attempt := 0; attempt <= w.o.InsertRetries; attempt++ {
		if attempt > 0 {
			t.retries.Inc()
			w.log.Warn("insert failed; retrying", "table", t.name, "rows", b.len(), "attempt", attempt, "err", err)
			select {
			case <-ctx.Done():
				return err
			case <-time.After(pause):
			}
			pause *= 2
			if fresh != nil {
				held, herr := w.holds(ctx, t, tok)
				if herr != nil {
					err = herr
					continue
				}
				if !held {
					next := fresh()
					w.log.Info("the table holds no row of the failed attempt; retrying under a new token", "table", t.name, "token", tok, "new_token", next)
					tok = next
				}
			}
		}
		w.log.Debug("insert started", "table", t.name, "month", b.month(), "rows", b.len(), "attempt", attempt)
		ictx, cancel := context.WithTimeout(ctx, insertTimeout)
		err = w.insertBatch(ictx, t.name, b, tok)
		cancel()
		w.log.Debug("insert ended", "table", t.name, "ok", err == nil)
		if err == nil {
			return nil
		}
	}
	return err
}

func (w *Writer) insert(ctx context.Context, table string, b batch, tok string) error {
	names, cols := insertColumns(b, tok)
	ctx = clickhouse.Context(ctx, clickhouse.WithQueryID(w.insertQueryID(table)), clickhouse.WithSettings(insertSettings(tok)))
	pb, err := w.o.ClickHouse.PrepareBatch(ctx, insertStatement(w.o.Database, table, names))
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	defer pb.Close()
	for i, c := range cols {
		if err := pb.Column(i).Append(c); err != nil {
			return fmt.Errorf("column %s: %w", names[i], err)
		}
	}
	if w.beforeSend != nil {
		w.beforeSend(table)
	}
	if err := pb.Send(); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

// insertStatement is the INSERT of one batch's columns into a table.
func insertStatement(database, table string, names []string) string {
	return "INSERT INTO `" + database + "`.`" + table + "` (" + strings.Join(names, ", ") + ")"
}

// insertColumns are the batch's columns and insert_token, the insert's
// token on every row (resendLastInsert finds the last insert by it).
func insertColumns(b batch, tok string) ([]string, []any) {
	names, cols := b.columns()
	toks := make([]string, b.len())
	for i := range toks {
		toks[i] = tok
	}
	return append(names, "insert_token"), append(cols, toks)
}

// insertSettings make ClickHouse drop an insert whose token it has already
// stored: a retry of an insert that landed but whose answer was lost, or
// the insert resendLastInsert sends again. Each roll-up then checks the
// token on its own (deduplicate_blocks_in_dependent_materialized_views,
// set here whatever the server's profile says): it stores the block's
// aggregate if it lacks it and drops it if it has it. With the setting off,
// ClickHouse 26.7 counts the repeated block in every roll-up again.
func insertSettings(tok string) clickhouse.Settings {
	return clickhouse.Settings{
		"insert_deduplication_token":                         tok,
		"insert_deduplicate":                                 1,
		"deduplicate_blocks_in_dependent_materialized_views": 1,
	}
}

// storedUnder reports whether the table holds rows written with token tok
// (a token names one insert of one table), once no insert into that table
// runs on the server (an attempt whose client gave up may still be
// committing), waiting at most insertTimeout for that. Query ids of the
// table's inserts start with queryIDPrefix, the table's name and "-".
func (w *Writer) storedUnder(ctx context.Context, t *table, tok string) (bool, error) {
	prefix := w.queryIDPrefix() + t.name + "-"
	deadline := time.Now().Add(insertTimeout) // then the session starts over, and waits with its context
	for {
		var n uint64
		if err := w.o.ClickHouse.QueryRow(ctx, "SELECT count() FROM system.processes WHERE startsWith(query_id, ?)", prefix).Scan(&n); err != nil {
			return false, fmt.Errorf("look for inserts into %s in flight: %w", t.name, err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("an insert into %s still runs on the server after %v", t.name, insertTimeout)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(w.pollEvery):
		}
	}
	var rows uint64
	if err := w.o.ClickHouse.QueryRow(ctx, "SELECT count() FROM `"+w.o.Database+"`.`"+t.name+"` WHERE insert_token = ?", tok).Scan(&rows); err != nil {
		return false, fmt.Errorf("look for the rows of an insert into %s: %w", t.name, err)
	}
	return rows > 0, nil
}

// insertQueryID is a new query id for an insert into table: unique, and
// starting with queryIDPrefix, which awaitInFlightInserts looks for.
func (w *Writer) insertQueryID(table string) string {
	return w.queryIDPrefix() + table + "-" + randomHex()
}

// queryIDPrefix starts the query id of every insert into this database.
func (w *Writer) queryIDPrefix() string { return "herald-audit-" + w.o.Database + "-" }

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	return hex.EncodeToString(b[:])
}

// awaitInFlightInserts waits until the server runs no insert of an audit
// writer into this database: one whose client died (a previous process,
// or an attempt of this one that timed out) may still commit, and the
// offsets must be read after it does.
func (w *Writer) awaitInFlightInserts(ctx context.Context) error {
	waited := time.Duration(0)
	for {
		n, err := w.inFlight(ctx)
		if err != nil {
			return fmt.Errorf("auditwriter: look for inserts in flight: %w", err)
		}
		if n == 0 {
			if waited > 0 {
				w.log.Info("inserts in flight have ended", "waited", waited.Round(time.Millisecond))
			}
			return nil
		}
		if level, msg, ok := inFlightNotice(waited); ok {
			w.log.Log(ctx, level, msg, "in_flight", n, "waited", waited)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.pollEvery):
		}
		waited += w.pollEvery
	}
}

// inFlightNotice says whether the wait for inserts in flight is logged
// after waited, at which level and with which message: once at info when it
// begins, then a warning every 10 s (one waiting that long suggests a
// second writer).
func inFlightNotice(waited time.Duration) (level slog.Level, msg string, ok bool) {
	if waited == 0 {
		return slog.LevelInfo, "waiting for inserts of an earlier writer to end before resuming", true
	} else if waited%(10*time.Second) == 0 {
		return slog.LevelWarn, "inserts of an earlier writer are still running (is another audit writer running against this database?)", true
	}
	return 0, "", false
}

// inFlightInserts counts the server's queries that are inserts of an audit
// writer into this database.
func (w *Writer) inFlightInserts(ctx context.Context) (uint64, error) {
	var n uint64
	err := w.o.ClickHouse.QueryRow(ctx, "SELECT count() FROM system.processes WHERE startsWith(query_id, ?)", w.queryIDPrefix()).Scan(&n)
	return n, err
}

// resumeOffsets returns, for every partition of every audited topic, the
// offset after the highest one its table holds (the log start when none).
func (w *Writer) resumeOffsets(ctx context.Context) (map[string]map[int32]kgo.Offset, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.o.Brokers...)}, w.o.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("auditwriter: kafka client: %w", err)
	}
	defer cl.Close()
	names := make([]string, 0, len(w.tables))
	for _, t := range w.tables {
		names = append(names, t.topic)
	}
	details, err := kadm.NewClient(cl).ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("auditwriter: list topics: %w", err)
	}
	out := map[string]map[int32]kgo.Offset{}
	for _, t := range w.tables {
		d, ok := details[t.topic]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			return nil, fmt.Errorf("auditwriter: topic %s is missing (run herald topics create): %v", t.topic, d.Err)
		}
		if err := w.resendLast(ctx, t); err != nil {
			return nil, err
		}
		stored, err := w.stored(ctx, t)
		if err != nil {
			return nil, err
		}
		parts := resumeFrom(stored, d.Partitions.Numbers())
		out[t.topic] = parts
		w.log.Info("resuming", "table", t.name, "topic", t.topic, "partitions", len(parts), "from", describe(stored))
	}
	return out, nil
}

// resendLastInsert sends the table's last INSERT again (the one that
// wrote the latest written_at among rows with an insert_token): the same
// records, read again from Kafka between the first and last offsets the
// rows hold per partition, made into the same batch, with the same token.
// The table drops it as a duplicate; a roll-up that lacks its aggregate
// (the server died between the table's part and the materialized views'
// parts) stores it, one that has it drops it.
//
// Only the last INSERT of a table can lack its roll-ups: a table's inserts
// run one at a time, none runs after a failed one, and every session
// starts with this. Only the last one is sent again: an INSERT sent again
// after more than 1000 others would be out of the roll-ups' deduplication
// window and counted twice. The rows are read again from Kafka rather than
// with INSERT … SELECT from the table: ClickHouse 26.7 gives rows read
// back in more than one chunk (more than 65 409 rows) a block id other than
// the INSERT's, so the table would store them again. A
// rebuilt batch whose token is not the stored one (its records fell to
// Kafka's retention or the rows to the table's TTL) is not sent, and a
// warning says so. Then, sent or not, each roll-up is compared with the
// table over the hours the insert wrote, and what it lacks is inserted
// into it (repairRollUps): that repairs a roll-up whose deduplication
// record outlived its part, which drops the resend.
//
// A failed send is retried with its token as a batch's insert is
// (insertRetrying): a session start that gave up on the first failure
// would make every start of a writer whose inserts fail now and then
// depend on one send landing (the session test once saw every restart end
// this way, one table's resend failing each time, until its deadline).
// It runs after the wait for inserts in flight and its insert has a query
// id the next wait looks for; run twice, it changes nothing. (ClickHouse
// does not tell the client whether a roll-up stored the block: 26.7's
// InsertedRows profile event counts the rows it dropped as duplicates too.)
func (w *Writer) resendLastInsert(ctx context.Context, t *table) error {
	tok, err := w.lastToken(ctx, t)
	if err != nil {
		return err
	}
	if tok == "" {
		return nil // nothing written with a token yet
	}
	spans, err := w.spans(ctx, t, tok)
	if err != nil {
		return err
	}
	b, whole, err := w.readAgain(ctx, t, spans)
	if err != nil {
		return err
	}
	if !whole {
		w.log.Warn("the last insert's records are no longer all in Kafka; its roll-ups are compared with the table only",
			"table", t.name, "token", tok)
		return w.repair(ctx, t, tok)
	}
	if got := token(t.name, b); !strings.HasPrefix(tok, got+"-") && got != tok {
		w.log.Warn("the last insert cannot be made again from Kafka; its roll-ups are compared with the table only",
			"table", t.name, "token", tok, "rebuilt_token", got, "rows", b.len())
		return w.repair(ctx, t, tok)
	}
	if err := w.insertRetrying(ctx, t, b, tok, nil); err != nil {
		return fmt.Errorf("auditwriter: send the last insert into %s again (%d rows, token %s): %w", t.name, b.len(), tok, err)
	}
	w.log.Info("last insert sent again for the roll-ups", "table", t.name, "rows", b.len(), "token", tok)
	return w.repair(ctx, t, tok)
}

// lastInsertToken returns the token of the table's last INSERT, "" when no
// row of the table's topic has one.
func (w *Writer) lastInsertToken(ctx context.Context, t *table) (string, error) {
	var tok string
	err := w.o.ClickHouse.QueryRow(ctx, lastInsertQuery(w.o.Database, t.name), t.topic).Scan(&tok)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("auditwriter: find the last insert into %s: %w", t.name, err)
	}
	return tok, nil
}

// lastInsertQuery selects the token of the last INSERT into a table whose
// rows have a token, for one topic (its one parameter).
func lastInsertQuery(database, table string) string {
	return "SELECT insert_token FROM `" + database + "`.`" + table +
		"` WHERE kafka_topic = ? AND insert_token != '' ORDER BY written_at DESC LIMIT 1"
}

// insertSpans returns the first and last offsets, per partition, of the
// rows one INSERT wrote.
func (w *Writer) insertSpans(ctx context.Context, t *table, tok string) (map[int32][2]int64, error) {
	rows, err := w.o.ClickHouse.Query(ctx, insertSpansQuery(w.o.Database, t.name), t.topic, tok)
	if err != nil {
		return nil, fmt.Errorf("auditwriter: read the offsets of the last insert into %s: %w", t.name, err)
	}
	defer rows.Close()
	out := map[int32][2]int64{}
	for rows.Next() {
		var p int32
		var first, last int64
		if err := rows.Scan(&p, &first, &last); err != nil {
			return nil, fmt.Errorf("auditwriter: read the offsets of the last insert into %s: %w", t.name, err)
		}
		out[p] = [2]int64{first, last}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auditwriter: read the offsets of the last insert into %s: %w", t.name, err)
	}
	return out, nil
}

// insertSpansQuery selects the first and last offsets per partition of the
// rows of one topic and one insert token (its two parameters) in a table.
func insertSpansQuery(database, table string) string {
	return "SELECT kafka_partition, min(kafka_offset), max(kafka_offset) FROM `" + database + "`.`" + table +
		"` WHERE kafka_topic = ? AND insert_token = ? GROUP BY kafka_partition"
}

// readAgainTimeout bounds the reading of one insert's records again.
const readAgainTimeout = time.Minute

// readAgain reads the records of spans (first and last offset per
// partition of the table's topic) from Kafka, read_committed as the
// session reads them, into a new batch. whole is false, and the batch nil,
// when the log no longer holds every span (retention deleted its start, or
// the topic was re-created).
func (w *Writer) readAgain(ctx context.Context, t *table, spans map[int32][2]int64) (b batch, whole bool, err error) {
	opts := append([]kgo.Opt{kgo.SeedBrokers(w.o.Brokers...)}, w.o.ClientOpts...)
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, false, fmt.Errorf("auditwriter: kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	starts, err := adm.ListStartOffsets(ctx, t.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, false, fmt.Errorf("auditwriter: read the last insert into %s again: list start offsets: %w", t.name, err)
	}
	ends, err := adm.ListEndOffsets(ctx, t.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, false, fmt.Errorf("auditwriter: read the last insert into %s again: list end offsets: %w", t.name, err)
	}
	left := map[int32]int64{} // partition → last offset, until read
	start := map[int32]kgo.Offset{}
	for p, sp := range spans {
		s, sok := starts.Lookup(t.topic, p)
		e, eok := ends.Lookup(t.topic, p)
		if !sok || !eok || s.Offset > sp[0] || e.Offset <= sp[1] {
			return nil, false, nil
		}
		start[p], left[p] = kgo.NewOffset().At(sp[0]), sp[1]
	}

	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{t.topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return nil, false, fmt.Errorf("auditwriter: kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, readAgainTimeout)
	defer cancel()
	b = t.newBatch()
	for len(left) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, false, fmt.Errorf("auditwriter: read the last insert into %s again from Kafka: %w", t.name, err)
		}
		var ferr error
		fetches.EachError(func(topic string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("auditwriter: read the last insert into %s again: fetch %s/%d: %w", t.name, topic, p, err)
			}
		})
		if ferr != nil {
			return nil, false, ferr
		}
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			for _, r := range fp.Records {
				last, ok := left[fp.Partition]
				if !ok {
					return // read already (a fetch buffered before the pause)
				}
				if r.Offset <= last {
					add(b, r)
				}
				if r.Offset >= last {
					delete(left, fp.Partition)
					cl.PauseFetchPartitions(map[string][]int32{t.topic: {fp.Partition}})
				}
			}
		})
	}
	return b, true, nil
}

// resumeFrom returns where each partition resumes: after the highest offset
// stored, or at the log start when the table holds none of it.
func resumeFrom(stored map[int32]int64, partitions []int32) map[int32]kgo.Offset {
	parts := make(map[int32]kgo.Offset, len(partitions))
	for _, p := range partitions {
		if off, ok := stored[p]; ok {
			parts[p] = kgo.NewOffset().At(off + 1)
		} else {
			parts[p] = kgo.NewOffset().AtStart()
		}
	}
	return parts
}

// auditTables are the tables the writer fills, each with the topic (its
// short name) it copies.
var auditTables = []struct {
	name, short string
	newBatch    func() batch
}{
	{"requests", topics.Requests, newRequestsBatch},
	{"decisions", topics.Decisions, newDecisionsBatch},
	{"attempts", topics.Attempts, newAttemptsBatch},
	{"outcomes", topics.Outcomes, newOutcomesBatch},
	{"receipts", topics.Receipts, newReceiptsBatch},
	{"feed_items", topics.Feed, newFeedItemsBatch},
}

// Stored returns, for each topic the writer copies (full names, from
// cat), the highest offset its table in database holds per partition: the
// writer resumes after it, so a partition's end offset minus it, less one,
// is how far the audit record is behind (herald doctor reports it). A
// partition of which the table holds nothing is absent.
func Stored(ctx context.Context, conn driver.Conn, database string, cat *topics.Catalog) (map[string]map[int32]int64, error) {
	out := map[string]map[int32]int64{}
	for _, t := range auditTables {
		w := &Writer{o: Options{ClickHouse: conn, Database: database}}
		stored, err := w.storedOffsets(ctx, &table{name: t.name, topic: cat.Name(t.short)})
		if err != nil {
			return nil, err
		}
		out[cat.Name(t.short)] = stored
	}
	return out, nil
}

// storedOffsets returns the highest offset the table holds per partition.
func (w *Writer) storedOffsets(ctx context.Context, t *table) (map[int32]int64, error) {
	rows, err := w.o.ClickHouse.Query(ctx, storedOffsetsQuery(w.o.Database, t.name), t.topic)
	if err != nil {
		return nil, fmt.Errorf("auditwriter: read stored offsets of %s: %w", t.name, err)
	}
	defer rows.Close()
	out := map[int32]int64{}
	for rows.Next() {
		var p int32
		var off int64
		if err := rows.Scan(&p, &off); err != nil {
			return nil, fmt.Errorf("auditwriter: read stored offsets of %s: %w", t.name, err)
		}
		out[p] = off
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auditwriter: read stored offsets of %s: %w", t.name, err)
	}
	return out, nil
}

// storedOffsetsQuery selects the highest offset a table holds per
// partition of one topic (its one parameter).
func storedOffsetsQuery(database, table string) string {
	return "SELECT kafka_partition, max(kafka_offset) FROM `" + database + "`.`" + table +
		"` WHERE kafka_topic = ? GROUP BY kafka_partition"
}

func describe(stored map[int32]int64) string {
	if len(stored) == 0 {
		return "log start"
	}
	ps := make([]int32, 0, len(stored))
	for p := range stored {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%d:%d", p, stored[p]+1)
	}
	return s
}
