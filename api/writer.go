package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
)

// errClosed answers writes after Close.
var errClosed = errors.New("api: server is closed")

// writer is the API's Kafka producer. A write of one record (a send to one
// recipient, a device, a preference, a receipt) is produced on its own by
// an idempotent producer with acks=all: a single record is atomic without
// a transaction, and a transaction would cost the broker an
// AddPartitionsToTxn, an EndTxn and a commit marker on every partition it
// touched. A write of several records (a send to many recipients) goes
// through a transactional producer (acks=all, idempotent) that commits
// records in group transactions, so it is all-or-nothing: its records
// share one transaction, and a transaction that fails is aborted and
// reported to every write in it. Writes that arrive while a transaction
// commits queue up and go into the next one together (group commit), so
// concurrent requests share the cost of a commit.
type writer struct {
	// newPlain makes the producer of single records (nil: they go
	// through transactions too).
	newPlain   func() (*kgo.Client, error)
	newClient  func() (*kgo.Client, error)
	maxRecords int
	timeout    time.Duration
	log        *slog.Logger

	in      chan *submission
	stopped chan struct{}

	committed, aborted *metrics.Counter   // transactions ended, by result
	writes, records    *metrics.Histogram // HTTP requests' writes and records per transaction
	seconds            *metrics.Histogram // begin to end of a transaction

	mu sync.Mutex // guards cl against Close racing a reset
	cl *kgo.Client

	plainMu   sync.Mutex
	plain     *kgo.Client
	plainDone bool             // closed: no new producer
	single    *metrics.Counter // single records produced without a transaction
}

type submission struct {
	records []*kgo.Record
	done    chan error
}

func newWriter(newClient func() (*kgo.Client, error), maxRecords int, timeout time.Duration, log *slog.Logger, m *metrics.Registry) *writer {
	return &writer{newClient: newClient, maxRecords: maxRecords, timeout: timeout, log: log,
		in: make(chan *submission), stopped: make(chan struct{}),
		single:    m.Counter("herald_api_single_records_total", "records produced without a transaction (idempotent, acks=all): writes of one record, and explains"),
		committed: m.Counter("herald_api_transactions_total", "the API's group-commit transactions ended", "result", "committed"),
		aborted:   m.Counter("herald_api_transactions_total", "the API's group-commit transactions ended", "result", "aborted"),
		writes:    m.Histogram("herald_api_transaction_writes", "HTTP requests' writes sharing one transaction (group commit)", metrics.SizeBuckets),
		records:   m.Histogram("herald_api_transaction_records", "records in one transaction", metrics.SizeBuckets),
		seconds: m.Histogram("herald_api_transaction_seconds", "time from beginning a transaction to its end (commit or abort), produce and flush included",
			metrics.LatencyBuckets),
	}
}

// write commits recs in one transaction (shared with other writes) and
// returns nil once they are durably in Kafka. A non-nil error means they
// are not, except for an error wrapping errCommitUnknown, after which they
// may be.
func (w *writer) write(ctx context.Context, recs []*kgo.Record) error {
	if len(recs) == 1 && w.newPlain != nil {
		return w.writePlain(ctx, recs)
	}
	s := &submission{records: recs, done: make(chan error, 1)}
	select {
	case w.in <- s:
	case <-ctx.Done():
		return fmt.Errorf("api: write not started: %w", ctx.Err())
	case <-w.stopped:
		return errClosed
	}
	// Submitted: wait for the outcome even if the caller went away; the
	// transaction's own timeout bounds it.
	return <-s.done
}

// writePlain produces records without a transaction, each on its own
// (a single record of a write, or explains, which need no atomicity), and
// returns nil once every in-sync replica has every one. Any error is
// reported as errCommitUnknown: a produce that failed after it was sent
// (a timeout, a broker gone) may have been appended, and the caller's
// retry with the same key is then decided as a replay or a duplicate.
func (w *writer) writePlain(ctx context.Context, recs []*kgo.Record) error {
	cl, err := w.plainClient()
	if err != nil {
		return err
	}
	// Not the request's context: a caller gone mid-produce would leave the
	// outcome unknown for nothing. The timeout bounds it.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.timeout)
	defer cancel()
	// Produce with a promise, not ProduceSync: franz-go's ProduceSync
	// drains its records' partitions at once (v1.22: unlingerAndManuallyDrain),
	// so its records never linger and every send cost a produce request of
	// its own whatever Config.ProducerLinger said
	// (docs/benchmarks-history.md, "Request → decision at 2,000/s").
	done := make(chan error, len(recs))
	for _, r := range recs {
		cl.Produce(pctx, r, func(_ *kgo.Record, err error) { done <- err })
	}
	var first error
	for range recs {
		if err := <-done; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("api: produce: %w: %w", errCommitUnknown, first)
	}
	w.single.Add(int64(len(recs)))
	return nil
}

func (w *writer) plainClient() (*kgo.Client, error) {
	w.plainMu.Lock()
	defer w.plainMu.Unlock()
	if w.plainDone {
		return nil, errClosed
	}
	if w.plain == nil {
		cl, err := w.newPlain()
		if err != nil {
			return nil, fmt.Errorf("api: producer: %w", err)
		}
		w.plain = cl
	}
	return w.plain, nil
}

// errCommitUnknown marks a commit whose outcome Kafka did not confirm.
var errCommitUnknown = errors.New("transaction outcome unknown")

// run commits submissions until ctx is done. Only run touches the client
// between transactions.
func (w *writer) run(ctx context.Context) {
	defer close(w.stopped)
	defer w.closeClient()
	defer w.closePlain()
	// limit is the most records the next transaction collects: half the
	// records of a transaction that failed, a quarter more after one that
	// committed, within [1, maxRecords]. Under overload the queue always
	// holds maxRecords; a transaction that size that cannot commit within
	// the timeout failed every write in it, whose clients' retries filled
	// the next one to the same size: no send committed at all (found by
	// scripts/chaos: 5,000-record transactions on a CPU-starved cluster
	// aborted one after another for minutes).
	limit := w.maxRecords
	for {
		var batch []*submission
		select {
		case s := <-w.in:
			batch = append(batch, s)
		case <-ctx.Done():
			return
		}
		n := len(batch[0].records)
	collect:
		for n < limit {
			select {
			case s := <-w.in:
				batch = append(batch, s)
				n += len(s.records)
			default:
				break collect
			}
		}
		start := time.Now()
		err := w.commit(batch, n)
		w.seconds.ObserveSince(start)
		if err != nil {
			w.aborted.Inc()
			limit = max(min(limit, n)/2, 1)
		} else {
			limit = min(limit+limit/4+1, w.maxRecords)
			w.committed.Inc()
			w.writes.Observe(float64(len(batch)))
			w.records.Observe(float64(n))
		}
		for _, s := range batch {
			s.done <- err
		}
	}
}

func (w *writer) client() (*kgo.Client, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cl == nil {
		cl, err := w.newClient()
		if err != nil {
			return nil, fmt.Errorf("api: producer: %w", err)
		}
		w.cl = cl
	}
	return w.cl, nil
}

// closeClient drops the client; the next transaction makes a new one with
// the same transactional id, which fences anything the old one left open.
func (w *writer) closeClient() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cl != nil {
		w.cl.Close()
		w.cl = nil
	}
}

func (w *writer) closePlain() {
	w.plainMu.Lock()
	defer w.plainMu.Unlock()
	w.plainDone = true
	if w.plain != nil {
		w.plain.Close()
		w.plain = nil
	}
}

func (w *writer) commit(batch []*submission, n int) error {
	cl, err := w.client()
	if err != nil {
		return err
	}
	// Not the request's context: cancelling mid-commit would leave the
	// outcome unknown.
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		w.closeClient()
		return fmt.Errorf("api: begin transaction: %w", err)
	}
	var (
		mu      sync.Mutex
		prodErr error
	)
	for _, s := range batch {
		for _, r := range s.records {
			cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					if prodErr == nil {
						prodErr = fmt.Errorf("produce to %s: %w", r.Topic, err)
					}
					mu.Unlock()
				}
			})
		}
	}
	if err := cl.Flush(ctx); err != nil && prodErr == nil {
		prodErr = fmt.Errorf("flush: %w", err)
	}
	if prodErr != nil {
		w.abort(ctx, cl)
		w.log.Warn("transaction aborted", "records", n, "writes", len(batch), "err", prodErr)
		return fmt.Errorf("api: %w", prodErr)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		w.abort(ctx, cl)
		w.log.Warn("transaction commit failed", "records", n, "writes", len(batch), "err", err)
		return fmt.Errorf("api: commit: %w: %w", errCommitUnknown, err)
	}
	return nil
}

func (w *writer) abort(ctx context.Context, cl *kgo.Client) {
	if err := cl.AbortBufferedRecords(ctx); err != nil {
		w.closeClient()
		return
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		w.log.Warn("transaction abort failed; producer will be recreated", "err", err)
		w.closeClient()
	}
}
