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

// writer is the API's only Kafka producer: a transactional producer
// (acks=all, idempotent) that commits records in group transactions. Every
// write (the records of one HTTP request) is all-or-nothing: its records
// share one transaction, and a transaction that fails is aborted and
// reported to every write in it. Writes that arrive while a transaction
// commits queue up and go into the next one together (group commit), so
// concurrent requests share the cost of a commit.
type writer struct {
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
}

type submission struct {
	records []*kgo.Record
	done    chan error
}

func newWriter(newClient func() (*kgo.Client, error), maxRecords int, timeout time.Duration, log *slog.Logger, m *metrics.Registry) *writer {
	return &writer{newClient: newClient, maxRecords: maxRecords, timeout: timeout, log: log,
		in: make(chan *submission), stopped: make(chan struct{}),
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

// errCommitUnknown marks a commit whose outcome Kafka did not confirm.
var errCommitUnknown = errors.New("transaction outcome unknown")

// run commits submissions until ctx is done. Only run touches the client
// between transactions.
func (w *writer) run(ctx context.Context) {
	defer close(w.stopped)
	defer w.closeClient()
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
		for n < w.maxRecords {
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
		} else {
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
