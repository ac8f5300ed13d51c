package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/topics"
)

// ceilingOutputs are the topics the copy loop writes each input to: the
// dedupe stage's three (its 3.25 records per request are one to each,
// plus a second seen entry for a quarter of them).
var ceilingOutputs = []string{topics.Decisions, topics.Seen, topics.Accepted}

// copyOnKafka is the broker's ceiling for the stage on the same topics:
// a bare exactly-once copy loop (franz-go's GroupTransactSession, no
// herald code) that reads the run's herald.requests read_committed and
// writes every input record, as it is, to each of ceilingOutputs in the
// input's partition, with the input offsets in the same transaction of at
// most rn.txn inputs. It measures from the first records polled to the
// last input committed, and checks that every output topic then holds
// exactly one copy of each input.
func copyOnKafka(ctx context.Context, cat *topics.Catalog, group string, n int, rn run, o KafkaOptions, log *slog.Logger) (Row, error) {
	sess, err := kgo.NewGroupTransactSession(append([]kgo.Opt{
		kgo.SeedBrokers(o.Brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(cat.Name(topics.Requests)),
		kgo.TransactionalID(group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, o.ClientOpts...)...)
	if err != nil {
		return Row{}, fmt.Errorf("bench: kafka: copy loop: %w", err)
	}
	defer sess.Close()

	meter := o.meter()
	var (
		start     spanStart
		committed int
		txns      int
		mu        sync.Mutex
		produced  error
	)
	for committed < n {
		fs := sess.PollRecords(ctx, rn.txn)
		if err := ctx.Err(); err != nil {
			return Row{}, fmt.Errorf("bench: kafka: copy loop (%d of %d inputs committed): %w", committed, n, err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) { ferr = errors.Join(ferr, fmt.Errorf("partition %d: %w", p, err)) })
		if ferr != nil {
			return Row{}, fmt.Errorf("bench: kafka: copy loop: fetch: %w", ferr)
		}
		in := fs.Records()
		if len(in) == 0 {
			continue
		}
		if start.at.IsZero() {
			start = meter.start()
		}
		if err := sess.Begin(); err != nil {
			return Row{}, fmt.Errorf("bench: kafka: copy loop: begin: %w", err)
		}
		for _, r := range in {
			for _, short := range ceilingOutputs {
				out := &kgo.Record{Topic: cat.Name(short), Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers}
				sess.Produce(ctx, out, func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						produced = errors.Join(produced, err)
						mu.Unlock()
					}
				})
			}
		}
		ok, err := sess.End(ctx, kgo.TryCommit)
		mu.Lock()
		perr := produced
		mu.Unlock()
		if err != nil || perr != nil {
			return Row{}, fmt.Errorf("bench: kafka: copy loop: end transaction: %w", errors.Join(err, perr))
		}
		if ok {
			committed += len(in)
			txns++
		}
	}
	sp := meter.end(start)
	elapsed := sp.elapsed
	for _, short := range ceilingOutputs {
		copies := 0
		if err := readCommitted(ctx, cat.Name(short), o, func(*kgo.Record) error { copies++; return nil }); err != nil {
			return Row{}, err
		}
		if copies != n {
			return Row{}, fmt.Errorf("bench: kafka: copy loop: %s holds %d committed copies of %d inputs", cat.Name(short), copies, n)
		}
	}
	log.Info("stream copied", "elapsed", elapsed.Round(time.Millisecond), "transactions", txns)
	return Row{
		Backend:   KafkaBackend,
		Variant:   fmt.Sprintf("exactly-once copy loop (ceiling), txn ≤ %d, %s", rn.txn, rn.codec),
		Records:   n,
		Accepted:  -1,
		Decisions: -1,
		Elapsed:   elapsed,
		CPU:       sp.cpu,
		ServerCPU: sp.serverCPU,
		Note: fmt.Sprintf("not a decision: each request copied to %d topics (the stage writes 3.25 records); %d commits (%.0f rec/txn)",
			len(ceilingOutputs), txns, float64(n)/float64(max(txns, 1))),
	}, nil
}
