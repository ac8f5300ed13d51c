package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/metrics"
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
	// dead letter), never into errors.
	Process(r *kgo.Record, out *Out) error
	// Tick fires timers that are due, emitting into out; called once per
	// transaction after the batch.
	Tick(out *Out)
	// Commit makes the pending changes of the last transaction part of the
	// committed state; Abort drops them.
	Commit()
	Abort()
}

// Out collects the records a task emits inside the current transaction.
type Out struct {
	records []*kgo.Record
}

// Emit adds r to the transaction.
func (o *Out) Emit(r *kgo.Record) { o.records = append(o.records, r) }

// Len is the number of records emitted so far.
func (o *Out) Len() int { return len(o.records) }

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
	// NewTask returns the empty task of one input partition.
	NewTask func(partition int32) Task
	// Partitioner places output records (honouring Record.Partition for
	// changelog topics).
	Partitioner kgo.Partitioner
	// MaxBatchRecords and BatchInterval bound one transaction.
	MaxBatchRecords int
	BatchInterval   time.Duration
	// TransactionTimeout bounds how long a crashed instance's open
	// transaction can hold back readers.
	TransactionTimeout time.Duration
	// AfterCommit, when set, runs after every committed transaction, with
	// rebalances still blocked: a sink calls its providers here for the
	// intents the transaction just made durable. When it returns true the
	// runtime runs one more transaction at once, with no new input (only
	// Tick), so the results are committed before the partitions can move;
	// the step ends when it returns false. It is called with a context that
	// shutdown does not cancel: bound its work itself.
	AfterCommit func(ctx context.Context) bool
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
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.Default
	}
	return nil
}

// Runner runs one stage instance.
type Runner struct {
	cfg  Config
	sess *kgo.GroupTransactSession
	log  *slog.Logger

	// tasks is touched by the loop and by rebalance callbacks; rebalances
	// are blocked while the loop processes, but the lock documents and
	// enforces it.
	mu    sync.Mutex
	tasks map[int32]Task

	records, committed, aborted, restoredRecs *metrics.Counter
	partitions                                *metrics.Gauge
	restoreErr                                chan error
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
		restoreErr: make(chan error, 1),
	}
	m := cfg.Metrics
	r.records = m.Counter("herald_stage_records_total", "input records processed in committed transactions", "stage", cfg.Name)
	r.committed = m.Counter("herald_stage_transactions_total", "transactions ended", "stage", cfg.Name, "result", "committed")
	r.aborted = m.Counter("herald_stage_transactions_total", "transactions ended", "stage", cfg.Name, "result", "aborted")
	r.restoredRecs = m.Counter("herald_stage_restored_records_total", "changelog records restored", "stage", cfg.Name)
	r.partitions = m.Gauge("herald_stage_partitions", "input partitions owned", "stage", cfg.Name)

	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Input),
		kgo.TransactionalID(cfg.TransactionalID),
		kgo.TransactionTimeout(cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(r.assigned),
		kgo.OnPartitionsRevoked(r.revoked),
		kgo.OnPartitionsLost(r.revoked),
		kgo.SessionTimeout(cfg.SessionTimeout),
	}
	if cfg.GroupInstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.GroupInstanceID))
	}
	if cfg.Partitioner != nil {
		opts = append(opts, kgo.RecordPartitioner(cfg.Partitioner))
	}
	opts = append(opts, cfg.ClientOpts...)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, fmt.Errorf("stage %s: client: %w", cfg.Name, err)
	}
	r.sess = sess
	return r, nil
}

// Run processes until ctx is done or a fatal error, then leaves the group
// cleanly: the open transaction is committed or aborted first.
func (r *Runner) Run(ctx context.Context) error {
	defer r.sess.Close()
	r.log.Info("stage starting", "input", r.cfg.Input, "changelogs", r.cfg.Changelogs)
	for {
		if err := ctx.Err(); err != nil {
			r.log.Info("stage stopping")
			return nil
		}
		select {
		case err := <-r.restoreErr:
			return err
		default:
		}
		if err := r.step(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// step runs one transaction: poll up to a batch, process, tick, commit; then,
// while AfterCommit asks for it, one more transaction without input.
func (r *Runner) step(ctx context.Context) error {
	defer r.sess.AllowRebalance()

	deadline := time.Now().Add(r.cfg.BatchInterval)
	var batch []*kgo.Record
	for len(batch) < r.cfg.MaxBatchRecords {
		pollCtx, cancel := context.WithDeadline(ctx, deadline)
		fetches := r.sess.PollRecords(pollCtx, r.cfg.MaxBatchRecords-len(batch))
		cancel()
		if fetches.IsClientClosed() {
			return errors.New("stage: client closed")
		}
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			r.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
		})
		batch = append(batch, fetches.Records()...)
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			break
		}
	}
	if ctx.Err() != nil && len(batch) == 0 {
		return nil
	}
	// From here the batch is finished even if ctx is cancelled (shutdown):
	// a transaction left open would hold back every read_committed reader
	// of the output topics until it times out.
	ctx = context.WithoutCancel(ctx)
	for {
		committed, err := r.transact(ctx, batch)
		if err != nil || !committed || r.cfg.AfterCommit == nil || !r.cfg.AfterCommit(ctx) {
			return err
		}
		batch = nil
	}
}

// transact processes batch, ticks, and commits the outputs with the input
// offsets in one transaction.
func (r *Runner) transact(ctx context.Context, batch []*kgo.Record) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.TransactionTimeout)
	defer cancel()

	// Tasks run before the transaction begins: they only fill out.
	r.mu.Lock()
	var out Out
	for _, rec := range batch {
		t, ok := r.tasks[rec.Partition]
		if !ok { // revoked between poll and now: cannot happen with blocked rebalances
			r.mu.Unlock()
			return false, fmt.Errorf("stage %s: record for unowned partition %d", r.cfg.Name, rec.Partition)
		}
		if err := t.Process(rec, &out); err != nil {
			r.mu.Unlock()
			return false, fmt.Errorf("stage %s: process %s/%d@%d: %w", r.cfg.Name, rec.Topic, rec.Partition, rec.Offset, err)
		}
	}
	for _, t := range r.tasks {
		t.Tick(&out)
	}
	r.mu.Unlock()

	if len(batch) == 0 && out.Len() == 0 {
		return false, nil // idle: no transaction at all
	}
	if err := r.sess.Begin(); err != nil {
		return false, fmt.Errorf("stage %s: begin transaction: %w", r.cfg.Name, err)
	}

	var produceErr error
	var perr sync.Mutex
	for _, rec := range out.records {
		r.sess.Produce(ctx, rec, func(rec *kgo.Record, err error) {
			if err != nil {
				perr.Lock()
				if produceErr == nil {
					produceErr = fmt.Errorf("produce to %s: %w", rec.Topic, err)
				}
				perr.Unlock()
			}
		})
	}
	if err := r.sess.Client().Flush(ctx); err != nil {
		return false, fmt.Errorf("stage %s: flush: %w", r.cfg.Name, err)
	}
	try := kgo.TryCommit
	if produceErr != nil {
		r.log.Warn("aborting transaction after a produce error", "err", produceErr)
		try = kgo.TryAbort
	}
	committed, err := r.sess.End(ctx, try)

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
	} else {
		r.aborted.Inc()
		r.log.Info("transaction aborted; input rewound to the last commit", "records", len(batch))
	}
	if err != nil {
		return false, fmt.Errorf("stage %s: end transaction: %w", r.cfg.Name, err)
	}
	return committed, nil
}

// assigned restores each new partition's task from the changelogs before
// the loop sees any of its records.
func (r *Runner) assigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range assigned[r.cfg.Input] {
		start := time.Now()
		t := r.cfg.NewTask(p)
		err := awaitStableOffsets(ctx, cl, r.cfg.Group, r.cfg.Input, p)
		var n int64
		if err == nil {
			n, err = RestorePartition(ctx, cl, r.cfg.Changelogs, p, t, r.cfg.ClientOpts...)
		}
		if err != nil {
			err = fmt.Errorf("stage %s: restore partition %d: %w", r.cfg.Name, p, err)
			r.log.Error("restore failed", "partition", p, "err", err)
			select {
			case r.restoreErr <- err:
			default:
			}
			return
		}
		r.tasks[p] = t
		r.restoredRecs.Add(n)
		el := time.Since(start)
		r.log.Info("partition restored", "partition", p, "records", n, "elapsed", el.Round(time.Millisecond),
			"records_per_s", int(float64(n)/max(el.Seconds(), 1e-3)))
	}
	r.partitions.Set(int64(len(r.tasks)))
}

// revoked drops the state of partitions this instance no longer owns. The
// transaction is already ended: rebalances wait for AllowRebalance.
func (r *Runner) revoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range revoked[r.cfg.Input] {
		delete(r.tasks, p)
	}
	r.partitions.Set(int64(len(r.tasks)))
	r.log.Info("partitions revoked", "partitions", revoked[r.cfg.Input])
}

// RestorePartition reads partition p of every changelog, read_committed,
// from its start to its last stable offset, into t, and returns how many
// records it applied. cl lists offsets and names the seed brokers; the
// reading is done by a short-lived client with extra options added.
func RestorePartition(ctx context.Context, cl *kgo.Client, changelogs []string, p int32, t Task, extra ...kgo.Opt) (int64, error) {
	var total int64
	for _, topic := range changelogs {
		end, err := lastStableOffset(ctx, cl, topic, p)
		if err != nil {
			return total, err
		}
		if end <= 0 {
			continue
		}
		n, err := readUntil(ctx, cl, topic, p, end, t, extra)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// lastStableOffset lists one partition's end offset as a read_committed
// consumer sees it.
func lastStableOffset(ctx context.Context, cl *kgo.Client, topic string, p int32) (int64, error) {
	ends, err := LastStableOffsets(ctx, cl, topic, p)
	if err != nil {
		return 0, err
	}
	end, ok := ends[p]
	if !ok {
		return 0, fmt.Errorf("list offsets of %s/%d: empty response", topic, p)
	}
	return end, nil
}

// LastStableOffsets lists the end offsets of a topic's partitions as a
// read_committed consumer sees them (the last stable offsets): records
// below them are committed or aborted, none still open.
func LastStableOffsets(ctx context.Context, cl *kgo.Client, topic string, partitions ...int32) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = 1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	ends := make(map[int32]int64, len(partitions))
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return nil, fmt.Errorf("list offsets of %s/%d: %w", topic, rp.Partition, err)
			}
			ends[rp.Partition] = rp.Offset
		}
	}
	return ends, nil
}

// Records returns what was emitted, for tests and replay.
func (o *Out) Records() []*kgo.Record { return o.records }
