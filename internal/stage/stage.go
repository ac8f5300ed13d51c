package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/ops"
)

// Task is a stage's logic and state for one input partition. The runtime
// calls it from one goroutine at a time.
type Task interface {
	// Restore applies one committed changelog record (a nil Value is a
	// tombstone) while the partition is being restored.
	Restore(r *kgo.Record) error
	// Process handles one input record, emitting outputs and changelog
	// records into out. State changes stay pending until Commit. An error
	// stops the stage: tasks turn bad input into outputs (a rejection, a
	// dead letter), never into errors. The exception is an error marked
	// Transient (the broker unreachable while the task reads a side
	// table): it restarts the session, which drops every pending change
	// and processes the record again, as a restarted process would.
	Process(r *kgo.Record, out *Out) error
	// Tick fires timers that are due, emitting into out; called once per
	// transaction after the batch.
	Tick(out *Out)
	// Commit makes the pending changes of the last transaction part of the
	// committed state; Abort drops them. The runtime calls either only
	// once it is done with every record emitted in the transaction: after
	// the transaction's flush, when the producer holds none of them
	// (franz-go calls every record's promise before Flush returns), and
	// it reads none of them afterwards. From then on the task may reuse
	// their memory (the dedupe task does). On any other end of a
	// transaction (a task's error, a failed flush) the runtime calls
	// neither and drops the task with its session.
	Commit()
	Abort()
}

// Stateless is embedded by a Task that keeps no state, such as a
// forwarder that re-keys records onto another topic: its Restore, Tick,
// Commit and Abort do nothing, and what it emits is committed or aborted
// with its input's offsets like any task's output.
type Stateless struct{}

func (Stateless) Restore(*kgo.Record) error { return nil }
func (Stateless) Tick(*Out)                 {}
func (Stateless) Commit()                   {}
func (Stateless) Abort()                    {}

// Revoker is a Task that holds something outside itself (a registry of
// tasks, metrics series): Revoked is called, under the runner's lock, when
// its partition is revoked or lost, after the last transaction that touched
// it; the task is never called again (a partition assigned again gets a new
// task, restored).
type Revoker interface {
	Revoked()
}

// Out collects the records a task emits inside the current transaction.
type Out struct {
	records []*kgo.Record
}

// Emit adds r to the transaction. r is a record of its own, emitted once:
// the producer owns it until the transaction ends.
func (o *Out) Emit(r *kgo.Record) { o.records = append(o.records, r) }

// Len is the number of records emitted so far.
func (o *Out) Len() int { return len(o.records) }

// Reset empties o for the next transaction, keeping its room. The records
// it held are forgotten, not changed: the producer may still hold them.
func (o *Out) Reset() {
	clear(o.records)
	o.records = o.records[:0]
}

// Config configures one stage instance.
type Config struct {
	// Name of the stage ("dedupe"), for logs and metrics.
	Name    string
	Brokers []string
	// Group is the consumer group of all instances of the stage.
	Group string
	// TransactionalID is unique per instance and stable across its
	// restarts, so a restarted instance fences its crashed predecessor.
	TransactionalID string
	// GroupInstanceID, when set, makes this instance a static group member
	// (KIP-345): a restart with the same id takes its partitions back
	// without a rebalance, and a crash is noticed after SessionTimeout.
	GroupInstanceID string
	// SessionTimeout: 10 s by default.
	SessionTimeout time.Duration
	// Input is the topic consumed.
	Input string
	// Changelogs are restored, per assigned partition, into that
	// partition's task before any input is processed. They must be
	// co-partitioned with Input.
	Changelogs []string
	// Outputs are the topics the tasks write besides the changelogs and
	// DeadLetterTopic. A session starts only once the input, the
	// changelogs, the outputs and the dead-letter topic all exist: until
	// then each session ends at once with an error naming the first one
	// missing, and the next starts after a backoff. (A transaction that
	// produced to a missing topic would fail only after the producer's
	// metadata retries, and its abort wait out TransactionTimeout, each
	// session again until the topic is created.)
	Outputs []string
	// NewTask returns the empty task of one input partition.
	NewTask func(partition int32) Task
	// Partitioner places output records (honouring Record.Partition for
	// changelog topics).
	Partitioner kgo.Partitioner
	// MaxBatchRecords and BatchInterval bound one transaction.
	MaxBatchRecords int
	BatchInterval   time.Duration
	// MinTransactionInterval, when positive, is the shortest time from the
	// start of one transaction with input to the start of the next: a
	// batch keeps polling until it has passed (or the batch is full), so
	// the input that arrives meanwhile shares one transaction. Every
	// transaction costs the broker the same whatever it carries (EndTxn,
	// TxnOffsetCommit, the group heartbeat franz-go forces before it, a
	// marker on every partition it touched, the coordinator's state
	// changes, the readers' fetches of its outputs), so at moderate rates
	// this bounds that cost to 1/MinTransactionInterval a second, for at
	// most that much latency; a record that arrives after the interval has
	// passed (an idle stage's) is still committed at once. 0 (the
	// default): a transaction closes as soon as the fetch is drained.
	MinTransactionInterval time.Duration
	// TransactionTimeout bounds how long a crashed instance's open
	// transaction can hold back readers when no instance with the same
	// TransactionalID restarts to fence it.
	TransactionTimeout time.Duration
	// RebalanceTimeout is how long the group waits for members to rejoin
	// once a rebalance begins (60 s by default). Partitions are restored
	// inside the assignment, so a member restoring when the next rebalance
	// begins rejoins only when its restore ends: size it above the longest
	// restore, which is (records in the largest changelog partition) ×
	// ceil(partitions per member / RestoreParallelism) ÷ (restore rate).
	// The rate is logged per partition ("partition restored",
	// records_per_s).
	RebalanceTimeout time.Duration
	// RestoreParallelism bounds how many partitions restore at once
	// (4 by default).
	RestoreParallelism int
	// ResetOffsets is where a partition starts when the group has no
	// committed offset for it: "" (the default) starts at the beginning
	// but refuses to start a partition whose changelog already holds
	// committed state, since the group's offsets were then lost (expired
	// or deleted) and replaying the input would decide it again against
	// state that has moved on; "earliest" or "latest" is the operator's
	// explicit choice for that case.
	ResetOffsets string
	// DeadLetterTopic receives, in place of its outputs, an input record
	// whose outputs can never be written (too large, invalid), with the
	// reason and the record's position, in a transaction with its offset.
	// Empty: such a batch is retried with backoff and the error logged,
	// which stalls the partition until the cause is fixed.
	DeadLetterTopic string
	// Backoff spaces the retries of a batch whose produce failed with a
	// retriable error (backoff.Default when zero).
	Backoff backoff.Policy
	// AfterCommit, when set, runs after every committed transaction, with
	// rebalances still blocked: a sink calls its providers here for the
	// intents the transaction just made durable. When it returns true the
	// runtime runs one more transaction at once, with no new input (only
	// Tick), so the results are committed before the partitions can move;
	// the step ends when it returns false. It is called with a context that
	// shutdown does not cancel: bound its work itself.
	AfterCommit func(ctx context.Context) bool
	// ProducerLinger is how long the producer lets a batch of outputs
	// fill before sending it while the transaction's inputs are still
	// being processed (5 ms by default; negative: none; at most a
	// minute). The end of every transaction flushes at once, so a
	// transaction never waits for it; what it saves is broker work:
	// fewer, larger batches (BENCHMARKS.md, "CPU time per record").
	ProducerLinger time.Duration
	// ClientOpts are appended to the runtime's client options (logging,
	// kfake workarounds).
	ClientOpts []kgo.Opt
	Logger     *slog.Logger
	Metrics    *metrics.Registry
}

func (c *Config) defaults() error {
	if c.Name == "" || len(c.Brokers) == 0 || c.Group == "" || c.TransactionalID == "" || c.Input == "" || c.NewTask == nil {
		return errors.New("stage: Name, Brokers, Group, TransactionalID, Input and NewTask are required")
	}
	if c.MaxBatchRecords <= 0 {
		c.MaxBatchRecords = 2000
	}
	if c.BatchInterval <= 0 {
		c.BatchInterval = 100 * time.Millisecond
	}
	if c.TransactionTimeout <= 0 {
		c.TransactionTimeout = 10 * time.Second
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.RebalanceTimeout <= 0 {
		c.RebalanceTimeout = time.Minute
	}
	if c.RestoreParallelism <= 0 {
		c.RestoreParallelism = 4
	}
	if c.ProducerLinger == 0 {
		c.ProducerLinger = DefaultProducerLinger
	}
	if c.MinTransactionInterval < 0 || c.MinTransactionInterval > 10*time.Second {
		return fmt.Errorf("stage: MinTransactionInterval %v is not between 0 and 10s", c.MinTransactionInterval)
	}
	if c.ProducerLinger > time.Minute { // franz-go's limit
		return fmt.Errorf("stage: ProducerLinger %v is longer than a minute", c.ProducerLinger)
	}
	if err := CheckResetOffsets(c.ResetOffsets); err != nil {
		return fmt.Errorf("stage: ResetOffsets: %w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.Default
	}
	return nil
}

// DefaultProducerLinger is Config.ProducerLinger's default.
const DefaultProducerLinger = 5 * time.Millisecond

// Explicit choices for Config.ResetOffsets.
const (
	ResetEarliest = "earliest"
	ResetLatest   = "latest"
)

// CheckResetOffsets accepts the values of Config.ResetOffsets: empty,
// ResetEarliest or ResetLatest.
func CheckResetOffsets(s string) error {
	switch s {
	case "", ResetEarliest, ResetLatest:
		return nil
	}
	return fmt.Errorf("must be %s, %s or empty, got %q", ResetEarliest, ResetLatest, s)
}

// Runner runs one stage instance.
type Runner struct {
	cfg  Config
	opts []kgo.Opt
	sess *kgo.GroupTransactSession
	log  *slog.Logger

	// mu guards tasks, poison and isolate, which the loop and the
	// rebalance callbacks touch; rebalances are blocked while the loop
	// processes, but the lock documents and enforces it.
	mu    sync.Mutex
	tasks map[int32]Task
	// poison holds input records whose outputs can never be written, with
	// the reason: the next transaction that sees one dead-letters it.
	poison map[position]string
	// unwritable holds timers' outputs, by topic and key, that can never
	// be written, with the reason: the next transaction writes a dead
	// letter in place of a timer output with that topic and key.
	unwritable map[outputKey]string
	// isolate holds, per partition, the last input offset of a batch that
	// failed with an output that can never be written: up to it, records
	// are processed one per transaction, to learn which one it was.
	isolate map[int32]int64
	// batchStart is when the last batch with input was polled
	// (MinTransactionInterval counts from it).
	batchStart time.Time
	// retries counts consecutive transactions aborted by a retriable
	// produce error, for the backoff. Only the loop touches it.
	retries int
	// out collects each transaction's outputs, reset at its start: its
	// slice is kept from one transaction to the next rather than grown
	// again from nothing. Only the loop touches it.
	out Out
	// revocations counts calls of revoked (revoke or loss): a transaction
	// ended without the session checks it moved (see end).
	revocations uint64

	// stuck, hangingWarnings: the hanging transactions watch (hanging.go).
	hangingMu       sync.Mutex
	stuck           stuckTracker
	hangingWarnings []string

	assignedOnce atomic.Bool
	restoring    atomic.Int32
	// client is the current session's client, which broker asks through.
	client atomic.Pointer[kgo.Client]
	broker ops.KafkaProbe

	records, committed, aborted, restoredRecs, deadLettered, sessionRestarts *metrics.Counter
	partitions, restoringParts, hangingParts                                 *metrics.Gauge
	commitSeconds                                                            *metrics.Histogram
	lag                                                                      *metrics.Lag

	failMu  sync.Mutex
	failErr error
	// runCtx is Run's context and cancel stops it; both are set before
	// the session exists, so its callbacks see them.
	runCtx context.Context
	cancel context.CancelFunc
}

type position struct {
	partition int32
	offset    int64
}

// New prepares a runner; Run starts it.
func New(cfg Config) (*Runner, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r := &Runner{
		cfg:        cfg,
		log:        cfg.Logger.With("stage", cfg.Name, "txn_id", cfg.TransactionalID),
		tasks:      map[int32]Task{},
		poison:     map[position]string{},
		unwritable: map[outputKey]string{},
		isolate:    map[int32]int64{},
	}
	r.broker.Client = r.client.Load
	m := cfg.Metrics
	r.records = m.Counter("herald_stage_records_total", "input records processed in committed transactions", "stage", cfg.Name)
	r.committed = m.Counter("herald_stage_transactions_total", "transactions ended", "stage", cfg.Name, "result", "committed")
	r.aborted = m.Counter("herald_stage_transactions_total", "transactions ended", "stage", cfg.Name, "result", "aborted")
	r.restoredRecs = m.Counter("herald_stage_restored_records_total", "changelog records restored", "stage", cfg.Name)
	r.deadLettered = m.Counter("herald_stage_dead_letters_total", "input records dead-lettered because their outputs can never be written", "stage", cfg.Name)
	r.sessionRestarts = m.Counter("herald_stage_session_restarts_total", "sessions closed after a broker or transaction failure and started again", "stage", cfg.Name)
	r.partitions = m.Gauge("herald_stage_partitions", "input partitions owned", "stage", cfg.Name)
	r.hangingParts = m.Gauge("herald_stage_hanging_partitions",
		"partitions of the topics the stage writes whose last stable offset has stood below the high watermark longer than the transaction timeout (a hanging transaction)", "stage", cfg.Name)
	r.restoringParts = m.Gauge("herald_stage_restoring_partitions", "assigned input partitions whose state is being restored", "stage", cfg.Name)
	r.commitSeconds = m.Histogram("herald_stage_transaction_end_seconds", "time to end (commit or abort) a transaction, offsets included",
		metrics.LatencyBuckets, "stage", cfg.Name)
	r.lag = metrics.ConsumerLag(m, cfg.Name)

	reset := kgo.NewOffset().AtStart()
	if cfg.ResetOffsets == ResetLatest {
		reset = kgo.NewOffset().AtEnd()
	}
	r.opts = []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Input),
		kgo.TransactionalID(cfg.TransactionalID),
		kgo.TransactionTimeout(cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(reset),
		kgo.ProducerLinger(max(cfg.ProducerLinger, 0)),
		kgo.OnPartitionsAssigned(r.assigned),
		kgo.OnPartitionsRevoked(r.revoked),
		kgo.OnPartitionsLost(r.revoked),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
	}
	if cfg.GroupInstanceID != "" {
		r.opts = append(r.opts, kgo.InstanceID(cfg.GroupInstanceID))
	}
	if cfg.Partitioner != nil {
		r.opts = append(r.opts, kgo.RecordPartitioner(cfg.Partitioner))
	}
	r.opts = append(r.opts, cfg.ClientOpts...)
	return r, nil
}

// Ready reports whether the instance is running, has received its first
// assignment in its current session, no assigned partition is restoring,
// and a broker answered a metadata request within the last second or so:
// whether it processes its input now. A /readyz endpoint answers with it.
func (r *Runner) Ready() bool {
	return r.assignedOnce.Load() && r.restoring.Load() == 0 && r.broker.Ready()
}

// Restoring reports whether any assigned partition is restoring its state.
func (r *Runner) Restoring() bool { return r.restoring.Load() > 0 }

// fail records the first fatal error of a rebalance callback and stops Run.
func (r *Runner) fail(err error) {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	if r.failErr == nil {
		r.failErr = err
		r.log.Error("stage failing", "err", err)
		r.cancel()
	}
}

func (r *Runner) failure() error {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	return r.failErr
}

// Run processes until ctx is done or a fatal error, then leaves the group
// cleanly: the open transaction is committed or aborted first. It refuses
// to start when a changelog is not co-partitioned with the input, and
// (from the restore) when the group lost its offsets; it fences a crashed
// predecessor with the same TransactionalID before the first poll.
//
// A broker that cannot be reached, or a transaction that fails, does not
// stop it: the session (client, group membership, tasks) is closed and a
// new one started after a backoff, as a restarted process would be. The
// new session fences whatever transaction the old one left open, rejoins
// the group and restores its partitions from the changelogs, so the
// guarantees are those of a crash and restart, which the crash tests
// prove. Only a refusal (see fatalError) stops Run.
func (r *Runner) Run(ctx context.Context) error {
	failures := 0
	for {
		progressed, err := r.runSession(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if isFatal(err) {
			return err
		}
		if progressed {
			failures = 0
		}
		failures++
		d := r.cfg.Backoff.Delay(failures, 0)
		r.sessionRestarts.Inc()
		r.log.Warn("stage session failed; starting a new one after a backoff (its partitions are restored again)",
			"err", err, "failures", failures, "backoff", d.Round(time.Millisecond))
		if backoff.Sleep(ctx, d) != nil {
			return nil
		}
	}
}

// runSession runs one session: a client, its group membership and the
// tasks of its partitions, until ctx is done (nil) or an error. It reports
// whether it committed any transaction.
func (r *Runner) runSession(parent context.Context) (progressed bool, err error) {
	r.resetSession()
	if err := r.checkTopics(parent); err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(parent)
	r.runCtx, r.cancel = ctx, cancel // before the session: its callbacks use them
	sess, err := kgo.NewGroupTransactSession(r.opts...)
	if err != nil {
		cancel()
		return false, fatal(fmt.Errorf("stage %s: client: %w", r.cfg.Name, err))
	}
	r.sess = sess
	r.client.Store(sess.Client())
	defer r.client.Store(nil)
	// Cancel first: a restore still running (the broker gone) ends, so
	// Close, which waits for the rebalance callbacks, returns.
	defer sess.Close()
	defer cancel()
	defer r.assignedOnce.Store(false)
	r.log.Info("stage starting", "input", r.cfg.Input, "changelogs", r.cfg.Changelogs)

	// franz-go asks for a producer id lazily, at the first produce; a
	// predecessor that crashed with a transaction open would hold its
	// offsets unstable (and this instance's restore waiting) until the
	// transaction times out. Asking now fences it: the coordinator aborts
	// its transaction.
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		if f := r.failure(); f != nil {
			return false, f
		}
		if ctx.Err() != nil {
			return false, nil
		}
		return false, fmt.Errorf("stage %s: fence the previous transaction of %s: %w", r.cfg.Name, r.cfg.TransactionalID, err)
	}
	var watch sync.WaitGroup
	watch.Add(1)
	go func() { defer watch.Done(); r.watchHanging(ctx, sess.Client()) }()
	defer func() { cancel(); watch.Wait() }()
	committedBefore := r.committed.Value()
	for {
		progressed = r.committed.Value() > committedBefore
		if f := r.failure(); f != nil {
			return progressed, f
		}
		if ctx.Err() != nil {
			r.log.Info("stage stopping")
			return progressed, nil
		}
		wait, err := r.step(ctx)
		if err != nil {
			if f := r.failure(); f != nil {
				return progressed, f
			}
			if ctx.Err() != nil && !isFatal(err) {
				return progressed, nil
			}
			return progressed, err
		}
		if wait > 0 {
			backoff.Sleep(ctx, wait) // rebalances are allowed meanwhile
		}
	}
}

// resetSession forgets what the previous session owned: its tasks, its
// poisoned and isolated records and its failure. The next session's
// assignment restores every partition from the changelogs.
func (r *Runner) resetSession() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range r.tasks {
		r.lag.Forget(r.cfg.Input, p)
	}
	clear(r.tasks)
	clear(r.poison)
	clear(r.unwritable)
	clear(r.isolate)
	r.retries = 0
	r.partitions.Set(0)
	r.failMu.Lock()
	r.failErr = nil
	r.failMu.Unlock()
}

// fatalError marks an error that a new session cannot fix: a refusal to
// start (a changelog not co-partitioned with the input, a missing topic,
// lost group offsets), a task's error, or the broker refusing this
// instance (authorization, a fenced static member). Run returns it; every
// other error only restarts the session.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

func fatal(err error) error { return &fatalError{err} }

// transientError marks a task's error as one a new session can fix.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// Transient marks err, returned by a Task's Process, as one that a new
// session can fix: the broker or a side table out of reach, not bad input
// or a bug. Run restarts the session after a backoff instead of stopping;
// the new session restores the task from the changelogs and processes the
// record again. A nil err stays nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err}
}

// IsTransient reports whether err, or an error it wraps, is marked
// Transient.
func IsTransient(err error) bool {
	var t *transientError
	return errors.As(err, &t)
}

// isFatal reports whether err stops Run: a fatalError, or a broker error
// that says this instance is not allowed to do its work.
func isFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f) || Denied(err)
}

// Denied reports whether err is the broker refusing this instance its
// work (authorization, SASL, a fenced static member, a transaction timeout
// it will not take): no retry fixes it, unlike a broker out of reach or a
// topic not created yet. A side table that reads the broker (the route
// table) retries every other error, as a session does.
func Denied(err error) bool {
	for _, e := range []error{
		kerr.TransactionalIDAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.TopicAuthorizationFailed,
		kerr.ClusterAuthorizationFailed, kerr.SaslAuthenticationFailed, kerr.FencedInstanceID,
		kerr.InvalidTransactionTimeout,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// checkTopics makes sure the stage's topics exist (an error naming the
// first one missing, not fatal: the operator may be creating them) and
// refuses, fatally, a changelog whose partition count differs from the
// input's: its partition p would not hold the state of input partition p.
func (r *Runner) checkTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(r.cfg.Brokers...)}, r.cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("stage %s: admin client: %w", r.cfg.Name, err)
	}
	defer cl.Close()
	names := r.topicNames()
	td, err := kadm.NewClient(cl).ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("stage %s: list topics: %w", r.cfg.Name, err)
	}
	counts := make(map[string]int, len(names))
	for _, name := range names {
		d, ok := td[name]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("stage %s: topic %s does not exist (create herald's topics first: herald topics create)", r.cfg.Name, name)
		} else if d.Err != nil {
			return fmt.Errorf("stage %s: topic %s: %w", r.cfg.Name, name, d.Err)
		}
		counts[name] = len(d.Partitions)
	}
	for _, c := range r.cfg.Changelogs {
		if counts[c] != counts[r.cfg.Input] {
			return fatal(fmt.Errorf("stage %s: changelog %s has %d partitions but input %s has %d: a changelog must be co-partitioned with its input; refusing to start",
				r.cfg.Name, c, counts[c], r.cfg.Input, counts[r.cfg.Input]))
		}
	}
	return nil
}

// topicNames are the input, the changelogs, the outputs and the dead-letter
// topic, in that order (a name given twice is asked for twice).
func (r *Runner) topicNames() []string {
	names := append(append([]string{r.cfg.Input}, r.cfg.Changelogs...), r.cfg.Outputs...)
	if r.cfg.DeadLetterTopic != "" {
		names = append(names, r.cfg.DeadLetterTopic)
	}
	return names
}

// poll collects one batch. It waits up to BatchInterval for the first
// records, then takes only what the client has already buffered, up to
// limit: the transaction closes when the fetch is drained or the batch is
// full, never waiting for records that have not arrived, except that with
// a MinTransactionInterval it keeps polling until that long after the
// previous batch's start.
func (r *Runner) poll(ctx context.Context, limit int) ([]*kgo.Record, error) {
	pollCtx, cancel := context.WithTimeout(ctx, r.cfg.BatchInterval)
	defer cancel()
	var batch []*kgo.Record
	filling := false
	for {
		fetches := r.sess.PollRecords(pollCtx, limit-len(batch))
		if fetches.IsClientClosed() {
			return nil, errors.New("stage: client closed")
		}
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			r.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
		})
		r.lag.Observe(fetches)
		batch = append(batch, fetches.Records()...)
		if len(batch) >= limit || pollCtx.Err() != nil {
			if len(batch) > 0 {
				r.batchStart = time.Now()
			}
			return batch, nil
		}
		if len(batch) > 0 && r.sess.Client().BufferedFetchRecords() == 0 {
			if filling {
				// Until the interval's deadline ends pollCtx, polled at
				// most every half interval: a poll that drains the
				// buffer makes the client fetch again, and a fetch
				// returns with the first record there, so polling at
				// once would cost a fetch request per record; paced,
				// records pile up at the broker between fetches (about
				// three a transaction, whatever the rate).
				pace := time.NewTimer(r.cfg.MinTransactionInterval / 2)
				select {
				case <-pace.C:
				case <-pollCtx.Done():
				}
				pace.Stop()
				continue
			}
			until := r.batchStart.Add(r.cfg.MinTransactionInterval)
			if r.cfg.MinTransactionInterval <= 0 || !time.Now().Before(until) {
				r.batchStart = time.Now()
				return batch, nil
			}
			// Fill until the interval has passed: ctx is the caller's, so
			// the BatchInterval above no longer applies.
			cancel()
			pollCtx, cancel = context.WithDeadline(ctx, until)
			defer cancel()
			filling = true
		}
	}
}

// step runs one transaction: poll up to a batch, process, tick, commit; then,
// while AfterCommit asks for it, one more transaction without input. It
// returns how long to back off before the next step (after a retriable
// produce error), or a fatal error.
func (r *Runner) step(runCtx context.Context) (time.Duration, error) {
	defer r.sess.AllowRebalance()

	limit := r.cfg.MaxBatchRecords
	r.mu.Lock()
	if len(r.isolate) > 0 {
		limit = 1
	}
	r.mu.Unlock()
	batch, err := r.poll(runCtx, limit)
	if err != nil {
		return 0, err
	}
	if runCtx.Err() != nil && len(batch) == 0 {
		return 0, nil
	}
	// From here the batch is finished even if ctx is cancelled (shutdown):
	// a transaction left open would hold back every read_committed reader
	// of the output topics until it times out.
	ctx := context.WithoutCancel(runCtx)
	for {
		committed, wait, err := r.transact(ctx, batch)
		if err != nil || wait > 0 || !committed || r.cfg.AfterCommit == nil || !r.cfg.AfterCommit(ctx) {
			return wait, err
		}
		batch = nil
	}
}

// transact processes batch, ticks, and commits the outputs with the input
// offsets in one transaction. It reports whether it committed, and how
// long to back off before the next one (after a retriable produce error).
func (r *Runner) transact(ctx context.Context, batch []*kgo.Record) (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.TransactionTimeout)
	defer cancel()

	// Tasks fill out; every produceChunk outputs the transaction begins
	// (once) and the outputs so far go to the producer, which sends them
	// while the next inputs are processed.
	r.mu.Lock()
	revocations := r.revocations
	out := &r.out
	out.Reset()
	sent := r.newSending(ctx)
	for _, rec := range batch {
		t, ok := r.tasks[rec.Partition]
		if !ok { // revoked between poll and now: cannot happen with blocked rebalances
			r.mu.Unlock()
			sent.abandon()
			return false, 0, fatal(fmt.Errorf("stage %s: record for unowned partition %d", r.cfg.Name, rec.Partition))
		}
		if reason, ok := r.poison[position{rec.Partition, rec.Offset}]; ok {
			out.Emit(r.deadLetter(rec, reason))
			continue
		}
		if err := t.Process(rec, out); err != nil {
			r.mu.Unlock()
			err = fmt.Errorf("stage %s: process %s/%d@%d: %w", r.cfg.Name, rec.Topic, rec.Partition, rec.Offset, err)
			sent.abandon()
			if IsTransient(err) {
				return false, 0, err // the session restarts and drops the tasks
			}
			return false, 0, fatal(err)
		}
		if out.Len()-sent.n >= produceChunk {
			if err := sent.send(out, out.Len()); err != nil {
				r.mu.Unlock()
				return false, 0, err
			}
		}
	}
	ticksFrom := out.Len()
	for _, t := range r.tasks {
		t.Tick(out)
	}
	timerDeadLetters := r.replaceUnwritable(out, ticksFrom)
	r.mu.Unlock()

	if len(batch) == 0 && out.Len() == 0 {
		return false, 0, nil // idle: no transaction at all
	}
	if err := sent.send(out, out.Len()); err != nil {
		return false, 0, err
	}
	if err := r.sess.Client().Flush(ctx); err != nil {
		return false, 0, fmt.Errorf("stage %s: flush: %w", r.cfg.Name, err)
	}
	errs := sent.errors(out)
	var produceErr error
	var poisoned []int // outputs that can never be written
	for i, err := range errs {
		if err == nil {
			continue
		}
		if produceErr == nil {
			produceErr = fmt.Errorf("produce to %s: %w", out.records[i].Topic, err)
		}
		if neverWritable(err) {
			poisoned = append(poisoned, i)
		}
	}
	// What the poison handling below needs of the culprit is copied now:
	// from Commit or Abort on, the tasks may reuse their records.
	var culprit unwritableOutput
	if len(poisoned) > 0 {
		i := largest(out.records, poisoned)
		rec := out.records[i]
		culprit = unwritableOutput{at: i, key: outputKey{rec.Topic, string(rec.Key)}, keyBytes: len(rec.Key), valueBytes: len(rec.Value), err: errs[i]}
	}
	try := kgo.TryCommit
	if produceErr != nil {
		try = kgo.TryAbort
	}
	endStart := time.Now()
	committed, err := r.end(ctx, try, len(batch) == 0, revocations)
	r.commitSeconds.ObserveSince(endStart)

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.tasks {
		if committed {
			t.Commit()
		} else {
			t.Abort()
		}
	}
	if committed {
		r.committed.Inc()
		r.records.Add(int64(len(batch)))
		r.retries = 0
		r.deadLettered.Add(int64(timerDeadLetters))
		clear(r.unwritable) // used, or not emitted again: a later output with its key is not blamed
		for _, rec := range batch {
			pos := position{rec.Partition, rec.Offset}
			if _, ok := r.poison[pos]; ok {
				delete(r.poison, pos)
				r.deadLettered.Inc()
			}
			if last, ok := r.isolate[rec.Partition]; ok && rec.Offset >= last {
				delete(r.isolate, rec.Partition)
			}
		}
	} else {
		r.aborted.Inc()
		r.log.Info("transaction aborted; input rewound to the last commit", "records", len(batch))
	}
	if err != nil {
		return false, 0, fmt.Errorf("stage %s: end transaction: %w", r.cfg.Name, err)
	}
	if produceErr == nil {
		return committed, 0, nil
	}
	if len(poisoned) > 0 {
		isolated, err := r.notePoison(batch, culprit, ticksFrom)
		if err != nil || isolated {
			return false, 0, err // a fatal error, or a retry at once, one record at a time
		}
	}
	// A retriable error (or one no input record can be blamed for): the
	// same batch is retried from the rewound input after a backoff.
	r.retries++
	d := r.cfg.Backoff.Delay(r.retries, 0)
	r.log.Warn("transaction aborted after a produce error; retrying after a backoff",
		"err", produceErr, "retry", r.retries, "backoff", d.Round(time.Millisecond))
	return false, d, nil
}

// produceChunk is how many outputs a transaction collects before handing
// them to the producer while its batch is still being processed: large
// enough for full produce batches, small enough that the producer's
// goroutines encode, compress and send one chunk while the task fills the
// next.
var produceChunk = 1000

// sending hands one transaction's outputs to the producer, beginning the
// transaction with the first of them, and collects the outputs the
// producer failed: one promise for all of them, as a closure per output
// would cost an allocation each.
type sending struct {
	r       *Runner
	ctx     context.Context
	began   bool
	n       int // outputs handed to the producer
	promise func(*kgo.Record, error)
	mu      sync.Mutex
	failed  []failedOutput // written by promise
}

// failedOutput is an output the producer failed, and why.
type failedOutput struct {
	rec *kgo.Record
	err error
}

func (r *Runner) newSending(ctx context.Context) *sending {
	s := &sending{r: r, ctx: ctx}
	s.promise = func(rec *kgo.Record, err error) {
		if err == nil {
			return
		}
		s.mu.Lock()
		s.failed = append(s.failed, failedOutput{rec, err})
		s.mu.Unlock()
	}
	return s
}

// send begins the transaction if it has not begun (also with nothing to
// produce: a batch whose inputs emit nothing still commits their offsets
// in a transaction) and produces out.records[s.n:upto].
func (s *sending) send(out *Out, upto int) error {
	if !s.began {
		if err := s.r.sess.Begin(); err != nil {
			return fmt.Errorf("stage %s: begin transaction: %w", s.r.cfg.Name, err)
		}
		s.began = true
	}
	for _, rec := range out.records[s.n:upto] {
		s.r.sess.Produce(s.ctx, rec, s.promise)
	}
	s.n = upto
	return nil
}

// errors is each produced output's error by its index in out (nil: every
// output was written). Called after the producer's flush, when every
// promise has run. Each output is a record of its own (Out.Emit), so its
// pointer finds its index.
func (s *sending) errors(out *Out) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failed) == 0 {
		return nil
	}
	at := make(map[*kgo.Record]int, s.n)
	for i, rec := range out.records[:s.n] {
		at[rec] = i
	}
	errs := make([]error, s.n)
	for _, f := range s.failed {
		errs[at[f.rec]] = f.err
	}
	return errs
}

// abandon aborts the transaction if it began (a task failed while its
// batch was being processed): the session's abort drops the buffered
// outputs and rewinds the input. Its error is not reported: the caller
// ends the session with the task's error, and a transaction that could
// not be aborted here is aborted when the next session's producer
// initializes with the same transactional id.
func (s *sending) abandon() {
	if !s.began {
		return
	}
	if _, err := s.r.sess.End(s.ctx, kgo.TryAbort); err != nil {
		s.r.log.Warn("aborting the transaction of a failed batch", "err", err)
	}
}

// end ends the open transaction. One that consumed no input (only ticks,
// or a sink's results round) has no offsets of its own to commit, and a
// transaction that commits no offsets is not fenced by the group: a
// member the group has dropped — a zombie woken from a pause longer than
// its session timeout, whose partitions another instance has restored
// and is writing — would commit it, since nothing has told its client
// yet (the revoked-or-lost check below cannot see what the client does
// not know). Chaos seed 47 found this: an APNs sink SIGSTOPped 13 s
// between its provider calls and its results round wrote 794 second
// outcomes when it woke. So such a transaction commits the group's last
// committed offsets of the partitions it owns once more
// (fenceWithCommittedOffsets): the same offsets, but the TxnOffsetCommit
// carries this member's id and generation, and the coordinator refuses
// it from a member it no longer has (UNKNOWN_MEMBER_ID,
// ILLEGAL_GENERATION), which aborts the transaction
// (zombie_internal_test.go). Only before the group's first commit is
// there nothing to send again; such a transaction then commits with the
// client's EndTransaction, unfenced: GroupTransactSession.End, when it
// sends no offsets, treats the commit as pre-KIP-447 and holds its lock
// for 500 ms before returning (franz-go v1.22.3, txn.go).
// The revoked-or-lost check stays: a partition revoked or lost since the
// transaction's tasks ran (r.revocations moved) aborts it, as the session
// would (lost_internal_test.go). An abort always goes through the
// session, which rewinds the input to the last commit.
func (r *Runner) end(ctx context.Context, try kgo.TransactionEndTry, noInput bool, revocations uint64) (bool, error) {
	if !noInput || try == kgo.TryAbort {
		return r.sess.End(ctx, try)
	}
	r.mu.Lock()
	moved := r.revocations != revocations
	r.mu.Unlock()
	if moved {
		return r.sess.End(ctx, kgo.TryAbort)
	}
	if committed := r.sess.Client().CommittedOffsets()[r.cfg.Input]; len(committed) > 0 {
		return r.sess.End(kgo.PreTxnCommitFnContext(ctx, fenceWithCommittedOffsets(r.cfg.Input, committed)), kgo.TryCommit)
	}
	if err := r.sess.Client().EndTransaction(ctx, kgo.TryCommit); err != nil {
		return false, err
	}
	return true, nil
}

// fenceWithCommittedOffsets returns the TxnOffsetCommit hook of a
// transaction with no input: it puts the committed offsets of topic's
// partitions into a request that has none, so the coordinator checks the
// member's id and generation (see end).
func fenceWithCommittedOffsets(topic string, committed map[int32]kgo.EpochOffset) func(*kmsg.TxnOffsetCommitRequest) error {
	return func(req *kmsg.TxnOffsetCommitRequest) error {
		if len(req.Topics) > 0 {
			return nil
		}
		t := kmsg.NewTxnOffsetCommitRequestTopic()
		t.Topic = topic
		for p, eo := range committed {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition = p
			rp.Offset = eo.Offset
			rp.LeaderEpoch = eo.Epoch
			rp.Metadata = &req.MemberID
			t.Partitions = append(t.Partitions, rp)
		}
		req.Topics = append(req.Topics, t)
		return nil
	}
}

// notePoison handles an aborted batch some of whose outputs can never be
// written. A broker fails a whole partition's produce batch for one bad
// record, so every output sharing that partition reports the error; the
// culprit is taken to be the largest of them (the errors are about size,
// but for one that is not, such as a null key on a compacted topic, an
// innocent output may be blamed first). A timer's output is replaced by a
// dead letter in the next transaction (see replaceUnwritable). An input's
// output: a batch of one input record marks that record poisoned (the
// next transaction dead-letters it); a larger batch is reprocessed one
// record per transaction to name the input. It reports whether the retry
// needs no backoff. Called with r.mu held.
func (r *Runner) notePoison(batch []*kgo.Record, culprit unwritableOutput, ticksFrom int) (bool, error) {
	perr := culprit.err
	if r.cfg.DeadLetterTopic == "" {
		r.log.Error("an output can never be written and there is no dead-letter topic; retrying", "err", perr)
		return false, nil
	}
	if culprit.key.topic == r.cfg.DeadLetterTopic {
		return false, fatal(fmt.Errorf("stage %s: a dead letter can never be written: %w", r.cfg.Name, perr))
	}
	if culprit.at >= ticksFrom {
		r.unwritable[culprit.key] = perr.Error()
		r.log.Warn("a timer's output can never be written; dead-lettering it",
			"topic", culprit.key.topic, "key_bytes", culprit.keyBytes, "value_bytes", culprit.valueBytes, "err", perr)
		return true, nil
	}
	if len(batch) > 1 {
		for _, rec := range batch {
			r.isolate[rec.Partition] = max(r.isolate[rec.Partition], rec.Offset)
		}
		r.log.Warn("a batch has an output that can never be written; reprocessing it one record per transaction to find its input",
			"records", len(batch), "err", perr)
		return true, nil
	}
	rec := batch[0]
	pos := position{rec.Partition, rec.Offset}
	if _, ok := r.poison[pos]; ok {
		return false, fatal(fmt.Errorf("stage %s: the dead letter of %s/%d@%d can never be written either: %w",
			r.cfg.Name, rec.Topic, rec.Partition, rec.Offset, perr))
	}
	r.poison[pos] = perr.Error()
	r.log.Warn("an input record's output can never be written; dead-lettering the record",
		"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", perr)
	return true, nil
}

// unwritableOutput is what the runtime keeps of an output that can never
// be written, past the end of its transaction: its index in Out, its
// topic and key, its sizes and its produce error.
type unwritableOutput struct {
	at                   int
	key                  outputKey
	keyBytes, valueBytes int
	err                  error
}

// largest is the index, among at, of the largest record of out (key,
// value and headers, as Kafka counts a record's size); of equal sizes, the
// first in at.
func largest(out []*kgo.Record, at []int) int {
	best, size := at[0], -1
	for _, i := range at {
		n := len(out[i].Key) + len(out[i].Value)
		for _, h := range out[i].Headers {
			n += len(h.Key) + len(h.Value)
		}
		if n > size {
			best, size = i, n
		}
	}
	return best
}

// neverWritable reports whether a produce error is the record's own fault,
// so that retrying the same record can never succeed. CORRUPT_MESSAGE is
// not one: Kafka (and kerr) call it retriable, as a CRC failure in transit
// is; dead-lettering it would drop a good input record. (Its other cause,
// a null key on a compacted topic, is INVALID_RECORD on current brokers.)
func neverWritable(err error) bool {
	for _, e := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.InvalidTimestamp} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// assigned restores each new partition's task from the changelogs before
// the loop sees any of its records, RestoreParallelism partitions at a time.
func (r *Runner) assigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	defer r.assignedOnce.Store(true)
	parts := assigned[r.cfg.Input]
	r.restoring.Add(int32(len(parts)))
	r.restoringParts.Add(int64(len(parts)))
	// ctx is the client's, cancelled only once Close has left the group,
	// which waits for this callback: a restore must also end when Run is
	// told to stop.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.runCtx, cancel)()
	sem := make(chan struct{}, r.cfg.RestoreParallelism)
	var wg sync.WaitGroup
	for _, p := range parts {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer r.restoring.Add(-1)
			defer r.restoringParts.Add(-1)
			if ctx.Err() != nil {
				return
			}
			// An error after ctx ended (shutdown, or another partition's
			// failure) is a consequence, not a cause.
			if err := r.restorePartition(ctx, cl, p); err != nil && ctx.Err() == nil {
				r.fail(fmt.Errorf("stage %s: restore partition %d: %w", r.cfg.Name, p, err))
				cancel()
			}
		}()
	}
	wg.Wait()
}

// restorePartition waits until the previous owner's transactions on
// partition p are settled, restores p's task from the changelogs and adds
// it to the tasks.
func (r *Runner) restorePartition(ctx context.Context, cl *kgo.Client, p int32) error {
	start := time.Now()
	committed, err := awaitStableOffsets(ctx, cl, r.cfg.Group, r.cfg.Input, p)
	if err != nil {
		return err
	}
	t := r.cfg.NewTask(p)
	res, err := restore(ctx, cl, r.cfg.Changelogs, p, countingTask{t, r.restoredRecs}, r.log, r.cfg.ClientOpts)
	if err != nil {
		return err
	}
	if committed < 0 && res.committedState && r.cfg.ResetOffsets == "" {
		return fatal(fmt.Errorf("group %s has no committed offset for %s/%d but the changelogs hold committed state: "+
			"the group's offsets were lost (expired or deleted), and replaying the input would decide it again; "+
			"refusing to start: restart once with an explicit reset (--reset-offsets=earliest|latest, HERALD_RESET_OFFSETS)",
			r.cfg.Group, r.cfg.Input, p))
	}
	r.mu.Lock()
	r.tasks[p] = t
	r.partitions.Set(int64(len(r.tasks)))
	r.mu.Unlock()
	el := time.Since(start)
	r.log.Info("partition restored", "partition", p, "records", res.records, "elapsed", el.Round(time.Millisecond),
		"records_per_s", int(float64(res.records)/max(el.Seconds(), 1e-3)))
	return nil
}

// countingTask counts each changelog record restored as it is, so
// herald_stage_restored_records_total shows a long restore's progress.
type countingTask struct {
	Task
	restored *metrics.Counter
}

func (c countingTask) Restore(rec *kgo.Record) error {
	c.restored.Inc()
	return c.Task.Restore(rec)
}

// revoked drops the state of partitions this instance no longer owns. The
// transaction is already ended: rebalances wait for AllowRebalance.
func (r *Runner) revoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.revocations++
	for _, p := range revoked[r.cfg.Input] {
		if t, ok := r.tasks[p].(Revoker); ok {
			t.Revoked()
		}
		delete(r.tasks, p)
		delete(r.isolate, p)
		for pos := range r.poison {
			if pos.partition == p {
				delete(r.poison, pos)
			}
		}
	}
	r.partitions.Set(int64(len(r.tasks)))
	r.lag.Forget(r.cfg.Input, revoked[r.cfg.Input]...)
	r.log.Info("partitions revoked", "partitions", revoked[r.cfg.Input])
}

// Records returns what was emitted, for tests and replay.
func (o *Out) Records() []*kgo.Record { return o.records }
