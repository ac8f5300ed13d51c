package stage

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A hanging transaction (KIP-664) is one left open on a partition past its
// timeout: a producer died mid-transaction and its coordinator never ended
// it. Until it is ended, the partition's last stable offset stands still
// below its high watermark; read_committed readers (the next stage, a
// restore) stop there and the log cleaner cannot compact past it. The
// runner watches the topics it writes (outputs, changelogs, dead letters)
// and reports a partition whose last stable offset has stood at the same
// offset below the high watermark for longer than TransactionTimeout, when
// the coordinator should long have aborted any transaction of a crashed
// producer: as the gauge herald_stage_hanging_partitions and as readiness
// warnings (Warnings). `herald doctor` names the producer and aborts it.

// topicPartition names one partition.
type topicPartition struct {
	topic     string
	partition int32
}

// stuckAt is a partition's last stable offset below its high watermark,
// and when it was first seen there.
type stuckAt struct {
	lso, hwm int64
	since    time.Time
}

// stuckPartition is a partition stuck longer than the limit.
type stuckPartition struct {
	topicPartition
	stuckAt
}

// stuckTracker remembers, per partition, since when its last stable offset
// has stood at the same offset below the high watermark.
type stuckTracker struct {
	at map[topicPartition]stuckAt
}

// observe takes one reading (last stable offset and high watermark by
// partition) made at now and returns the partitions whose last stable
// offset has stood at the same offset below the high watermark since a
// reading more than limit before now, sorted. A partition missing from
// the reading is forgotten.
func (s *stuckTracker) observe(reading map[topicPartition][2]int64, now time.Time, limit time.Duration) []stuckPartition {
	if s.at == nil {
		s.at = map[topicPartition]stuckAt{}
	}
	for tp := range s.at {
		if _, ok := reading[tp]; !ok {
			delete(s.at, tp)
		}
	}
	var stuck []stuckPartition
	for tp, o := range reading {
		lso, hwm := o[0], o[1]
		if lso >= hwm {
			delete(s.at, tp)
			continue
		}
		prev, ok := s.at[tp]
		if !ok || prev.lso != lso {
			prev = stuckAt{lso: lso, since: now}
		}
		prev.hwm = hwm
		s.at[tp] = prev
		if now.Sub(prev.since) > limit {
			stuck = append(stuck, stuckPartition{tp, prev})
		}
	}
	sort.Slice(stuck, func(i, j int) bool {
		if stuck[i].topic != stuck[j].topic {
			return stuck[i].topic < stuck[j].topic
		}
		return stuck[i].partition < stuck[j].partition
	})
	return stuck
}

// Warnings are the runner's readiness warnings: each partition of the
// topics it writes whose last stable offset has stood below its high
// watermark for longer than TransactionTimeout (a hanging transaction).
// They do not make the runner unready: it still processes its input.
func (r *Runner) Warnings() []string {
	r.hangingMu.Lock()
	defer r.hangingMu.Unlock()
	return append([]string(nil), r.hangingWarnings...)
}

// watchHanging reads the last stable offsets and high watermarks of the
// topics the stage writes every half TransactionTimeout (at least every
// second) until ctx ends, and updates the gauge and the warnings.
func (r *Runner) watchHanging(ctx context.Context, cl *kgo.Client) {
	every := max(r.cfg.TransactionTimeout/2, time.Second)
	adm := kadm.NewClient(cl)
	topics := r.writtenTopics()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		reading, err := readStable(ctx, adm, topics)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Debug("hanging transactions: offsets not read", "err", err)
			}
			continue
		}
		r.noteHanging(reading, time.Now())
	}
}

// noteHanging updates the gauge and the warnings from one reading.
func (r *Runner) noteHanging(reading map[topicPartition][2]int64, now time.Time) {
	r.hangingMu.Lock()
	defer r.hangingMu.Unlock()
	stuck := r.stuck.observe(reading, now, r.cfg.TransactionTimeout)
	r.hangingParts.Set(int64(len(stuck)))
	var warnings []string
	for _, s := range stuck {
		warnings = append(warnings, fmt.Sprintf("%s/%d: last stable offset stuck at %d below %d for %v, longer than the transaction timeout %v: a hanging transaction (herald doctor names it; --abort-hanging ends it)",
			s.topic, s.partition, s.lso, s.hwm, now.Sub(s.since).Round(time.Second), r.cfg.TransactionTimeout))
	}
	if len(warnings) > 0 && len(r.hangingWarnings) == 0 {
		r.log.Warn("a partition this stage writes has a hanging transaction", "warning", warnings[0], "partitions", len(warnings))
	}
	r.hangingWarnings = warnings
}

// writtenTopics are the topics the stage writes: its outputs, changelogs
// and dead-letter topic.
func (r *Runner) writtenTopics() []string {
	names := append(append([]string(nil), r.cfg.Changelogs...), r.cfg.Outputs...)
	if r.cfg.DeadLetterTopic != "" {
		names = append(names, r.cfg.DeadLetterTopic)
	}
	return names
}

// readStable reads the last stable offset and the high watermark of every
// partition of topics.
func readStable(ctx context.Context, adm *kadm.Client, topics []string) (map[topicPartition][2]int64, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	hwm, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	lso, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	out := map[topicPartition][2]int64{}
	lso.Each(func(o kadm.ListedOffset) {
		h, ok := hwm.Lookup(o.Topic, o.Partition)
		if o.Err != nil || !ok || h.Err != nil {
			return
		}
		out[topicPartition{o.Topic, o.Partition}] = [2]int64{o.Offset, h.Offset}
	})
	return out, nil
}
