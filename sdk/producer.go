package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// ProducerConfig configures a Producer.
type ProducerConfig struct {
	Brokers []string
	// Catalog names the topics and places records (its Partitioner).
	Catalog *topics.Catalog
	// Tenant the producer sends for, and Name, the producer field of its
	// records (this service's name).
	Tenant, Name string
	// TransactionalID, when set, writes each Send in one Kafka transaction,
	// so a send to many recipients is all-or-nothing. Keep it unique per
	// running producer and stable across its restarts. Without it, records
	// are written with the idempotent producer one by one: a failed Send
	// may have written some of its recipients' records, and retrying it
	// with the same dedupe or idempotency key is safe.
	TransactionalID string
	// Format is how requests are written: schemas.FormatBinary (the zero
	// value: herald.request/v2, Protocol Buffers) or schemas.FormatJSON
	// (herald.request/v1, while a dedupe stage of an earlier herald, which
	// reads only JSON, still runs). Upgrade herald before its producers.
	Format schemas.Format
	// ClientOpts are added to the franz-go client.
	ClientOpts []kgo.Opt
}

// Producer writes herald.request records (v2 unless ProducerConfig.Format
// says v1) straight to the requests topic,
// keyed by notification id, with acks=all and the idempotent producer.
type Producer struct {
	cfg      ProducerConfig
	cl       *kgo.Client
	requests string
	mu       sync.Mutex // one transaction at a time
}

// NewProducer connects a producer.
func NewProducer(cfg ProducerConfig) (*Producer, error) {
	if len(cfg.Brokers) == 0 || cfg.Catalog == nil || cfg.Tenant == "" {
		return nil, errors.New("sdk: producer: Brokers, Catalog and Tenant are required")
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.RecordPartitioner(cfg.Catalog.Partitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}
	if cfg.TransactionalID != "" {
		opts = append(opts, kgo.TransactionalID(cfg.TransactionalID))
	}
	cl, err := kgo.NewClient(append(opts, cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("sdk: producer: %w", err)
	}
	return &Producer{cfg: cfg, cl: cl, requests: cfg.Catalog.Name(topics.Requests)}, nil
}

// Close flushes nothing further and closes the client.
func (p *Producer) Close() { p.cl.Close() }

// Send writes one request record per recipient (n.Recipients, or
// n.Target's user) and returns them, ids included, once they are durably
// in Kafka. Device, tag, segment and "all" targets need the HTTP API,
// which resolves them from its replica of devices and segments, and are
// refused. Records carry this host's clock as their time, which the dedupe
// stage decides on: a broker refuses records stamped more than
// herald.requests' message.timestamp.after.max.ms (5 minutes by default)
// ahead of its own clock, with kerr.InvalidTimestamp, so keep the clock
// synchronised.
func (p *Producer) Send(ctx context.Context, n Notification) ([]schemas.Request, error) {
	recipients := n.Recipients
	if n.Target != nil {
		if n.Target.Kind != TargetUser || len(recipients) > 0 {
			return nil, fmt.Errorf("sdk: producer: only recipients or a user target can be sent straight to Kafka")
		}
		recipients = []string{n.Target.UserID}
	}
	now := time.Now()
	reqs, err := n.Requests(recipients, RequestOptions{Tenant: p.cfg.Tenant, Producer: p.cfg.Name, Source: "sdk", Now: now})
	if err != nil {
		return nil, err
	}
	recs := make([]*kgo.Record, len(reqs))
	for i, rq := range reqs {
		rq.Schema = p.cfg.Format.RequestSchema()
		b, err := schemas.Encode(rq)
		if err != nil {
			return nil, err
		}
		recs[i] = &kgo.Record{Topic: p.requests, Key: []byte(rq.NotificationID), Value: b, Timestamp: now,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(rq.Schema)}}}
	}
	if p.cfg.TransactionalID == "" {
		if err := p.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return nil, fmt.Errorf("sdk: producer: write: %w", err)
		}
		return reqs, nil
	}
	if err := p.sendTxn(ctx, recs); err != nil {
		return nil, err
	}
	return reqs, nil
}

func (p *Producer) sendTxn(ctx context.Context, recs []*kgo.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cl.BeginTransaction(); err != nil {
		return fmt.Errorf("sdk: producer: begin transaction: %w", err)
	}
	// End with a context of its own: cancelling mid-commit would leave the
	// outcome unknown.
	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := p.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		if aerr := p.cl.AbortBufferedRecords(endCtx); aerr == nil {
			_ = p.cl.EndTransaction(endCtx, kgo.TryAbort)
		}
		return fmt.Errorf("sdk: producer: write: %w", err)
	}
	if err := p.cl.EndTransaction(endCtx, kgo.TryCommit); err != nil {
		_ = p.cl.EndTransaction(endCtx, kgo.TryAbort)
		return fmt.Errorf("sdk: producer: commit (outcome may be unknown; retry with the same keys): %w", err)
	}
	return nil
}
