// Package txnhold finds the transactions that hold partitions: a
// partition whose last stable offset is below its high watermark is held
// by an open transaction, and read_committed readers and the log cleaner
// wait there until it ends (KIP-664 calls one that never ends a hanging
// transaction). herald doctor reports and aborts them; the nemesis suite
// (scripts/chaos) requires none at the end of a run.
package txnhold

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Open is a transaction open on a herald partition: its last stable
// offset is below its high watermark because of it.
type Open struct {
	Topic     string
	Partition int32
	// LSO is the partition's last stable offset, HWM its high watermark.
	LSO, HWM int64
	// Of the producer, as the partition's leader describes it.
	ProducerID       int64
	ProducerEpoch    int16
	CoordinatorEpoch int32
	LastWrite        time.Time
	StartOffset      int64
	// Of the transaction, as its coordinator describes it; TxnID is empty
	// when no coordinator lists a transaction of the producer, or it does
	// not hold this partition (CoordinatorKnows false).
	TxnID            string
	State            string
	Started          time.Time
	Timeout          time.Duration
	CoordinatorKnows bool
}

// HangingLimit is how long t may stay open before it counts as hanging:
// hangingAfter when set, else its own timeout when its coordinator knows
// it, else maxTimeout (the brokers' transaction.max.timeout.ms, the longest
// any transaction may run).
func (t Open) HangingLimit(hangingAfter, maxTimeout time.Duration) time.Duration {
	if hangingAfter > 0 {
		return hangingAfter
	} else if t.CoordinatorKnows && t.Timeout > 0 {
		return t.Timeout
	}
	return maxTimeout
}

// Age is how long t has been open: since its coordinator says it started,
// else since the producer's last write to the partition.
func (t Open) Age(now time.Time) time.Duration {
	if t.CoordinatorKnows && !t.Started.IsZero() {
		return now.Sub(t.Started)
	}
	return now.Sub(t.LastWrite)
}

func (t Open) String() string {
	who := fmt.Sprintf("producer %d epoch %d", t.ProducerID, t.ProducerEpoch)
	if t.TxnID != "" {
		who += fmt.Sprintf(" (transactional id %s, %s)", t.TxnID, t.State)
	} else {
		who += " (no coordinator lists it)"
	}
	return fmt.Sprintf("%s/%d held by %s", t.Topic, t.Partition, who)
}

// Hanging splits the open transactions into those past their limit and
// the others.
func Hanging(txns []Open, now time.Time, hangingAfter, maxTimeout time.Duration) (hung, open []Open) {
	for _, t := range txns {
		if t.Age(now) > t.HangingLimit(hangingAfter, maxTimeout) {
			hung = append(hung, t)
		} else {
			open = append(open, t)
		}
	}
	return hung, open
}

// Find finds the partitions of the named topics whose last stable offset
// is below the high watermark, the producers holding them
// (DescribeProducers, KIP-664) and, where a coordinator lists one, each
// producer's transaction (ListTransactions, DescribeTransactions). The
// topics must exist.
func Find(ctx context.Context, adm *kadm.Client, names []string) ([]Open, error) {
	if len(names) == 0 {
		return nil, nil
	}
	hwm, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("high watermarks: %w", err)
	}
	lso, err := adm.ListCommittedOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("last stable offsets: %w", err)
	}
	stuck := kadm.TopicsSet{}
	lsoOf := map[string]map[int32][2]int64{}
	lso.Each(func(o kadm.ListedOffset) {
		h, ok := hwm.Lookup(o.Topic, o.Partition)
		if o.Err != nil || !ok || h.Err != nil || o.Offset >= h.Offset {
			return
		}
		if stuck[o.Topic] == nil {
			stuck[o.Topic] = map[int32]struct{}{}
		}
		stuck[o.Topic][o.Partition] = struct{}{}
		if lsoOf[o.Topic] == nil {
			lsoOf[o.Topic] = map[int32][2]int64{}
		}
		lsoOf[o.Topic][o.Partition] = [2]int64{o.Offset, h.Offset}
	})
	if len(stuck) == 0 {
		return nil, nil
	}
	described, err := adm.DescribeProducers(ctx, stuck)
	if err != nil {
		return nil, fmt.Errorf("describe producers: %w", err)
	}
	var txns []Open
	var pids []int64
	described.EachProducer(func(p kadm.DescribedProducer) {
		if p.CurrentTxnStartOffset < 0 {
			return
		}
		off := lsoOf[p.Topic][p.Partition]
		txns = append(txns, Open{Topic: p.Topic, Partition: p.Partition, LSO: off[0], HWM: off[1],
			ProducerID: p.ProducerID, ProducerEpoch: p.ProducerEpoch, CoordinatorEpoch: p.CoordinatorEpoch,
			LastWrite: time.UnixMilli(p.LastTimestamp), StartOffset: p.CurrentTxnStartOffset})
		pids = append(pids, p.ProducerID)
	})
	if len(txns) == 0 {
		return nil, nil
	}
	listed, err := adm.ListTransactions(ctx, pids, nil)
	if err != nil {
		return nil, fmt.Errorf("list transactions: %w", err)
	}
	byPID := map[int64]string{}
	listed.Each(func(l kadm.ListedTransaction) { byPID[l.ProducerID] = l.TxnID })
	var ids []string
	for _, id := range byPID {
		ids = append(ids, id)
	}
	var desc kadm.DescribedTransactions
	if len(ids) > 0 {
		if desc, err = adm.DescribeTransactions(ctx, ids...); err != nil {
			return nil, fmt.Errorf("describe transactions: %w", err)
		}
	}
	for i := range txns {
		t := &txns[i]
		id, ok := byPID[t.ProducerID]
		if !ok {
			continue
		}
		d, err := desc.On(id, nil)
		if err != nil || d.Err != nil {
			continue
		}
		t.TxnID, t.State = id, d.State
		t.Started, t.Timeout = time.UnixMilli(d.StartTimestamp), time.Duration(d.TimeoutMillis)*time.Millisecond
		_, holds := d.Topics[t.Topic][t.Partition]
		t.CoordinatorKnows = d.State == "Ongoing" && d.ProducerID == t.ProducerID && holds
	}
	return txns, nil
}
