package stage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/backoff"
)

// restored is what restoring one partition found.
type restored struct {
	// records applied to the task (tombstones included).
	records int64
	// committedState: the changelogs hold data or a commit marker, so
	// some transaction that committed input offsets wrote them.
	committedState bool
}

// RestorePartition reads partition p of every changelog, read_committed,
// from its start into t, up to its last stable offset once every
// transaction open on it when called has ended, and returns how many
// records it applied. cl lists offsets and names the seed brokers; the
// reading is done by a short-lived client with extra options added.
func RestorePartition(ctx context.Context, cl *kgo.Client, changelogs []string, p int32, t Task, extra ...kgo.Opt) (int64, error) {
	res, err := restore(ctx, cl, changelogs, p, t, slog.Default(), extra)
	return res.records, err
}

// restoreLogEvery is how often a restore still running logs how far it
// is.
var restoreLogEvery = 10 * time.Second

// restoreIdlePoll is how long a restore's poll waits for records before
// readUntil checks whether retention deleted what is left to read (a
// variable so the tests need not wait it out).
var restoreIdlePoll = 10 * time.Second

func restore(ctx context.Context, cl *kgo.Client, changelogs []string, p int32, t Task, log *slog.Logger, extra []kgo.Opt) (restored, error) {
	ends := map[string]int64{}
	for _, topic := range changelogs {
		end, err := SettledEnd(ctx, cl, topic, p, log)
		if err != nil {
			return restored{}, err
		}
		start, err := listOffset(ctx, cl, topic, p, 0, -2)
		if err != nil {
			return restored{}, err
		}
		if end > start {
			ends[topic] = end
		}
	}
	if len(ends) == 0 {
		return restored{}, nil
	}
	return readUntil(ctx, cl, ends, p, t, log, extra)
}

// SettledEnd waits until every transaction open on topic/p when it is
// called has ended, and returns the partition's last stable offset then.
//
// Kafka writes a transaction's markers to each of its partitions
// separately, after EndTxn returns; it does not order them across
// partitions. The group's offsets for an input partition can be stable
// (their marker written) while the co-partitioned changelog's marker is
// not yet: its last stable offset then stops before the previous owner's
// last transaction. Waiting until the last stable offset reaches the high
// watermark taken now covers that transaction. The wait is bounded by the
// transaction timeout of whoever holds a transaction open.
func SettledEnd(ctx context.Context, cl *kgo.Client, topic string, p int32, log *slog.Logger) (int64, error) {
	hwm, err := listOffset(ctx, cl, topic, p, 0, -1)
	if err != nil {
		return 0, err
	}
	waited := false
	for n := 0; ; n++ {
		lso, err := listOffset(ctx, cl, topic, p, 1, -1)
		if err != nil {
			return 0, err
		}
		if lso >= hwm {
			return lso, nil
		}
		if !waited {
			log.Info("restore waits for open transactions on the changelog", "topic", topic, "partition", p,
				"last_stable_offset", lso, "high_watermark", hwm)
			waited = true
		}
		if err := backoff.Sleep(ctx, settlePoll.Ceiling(n)); err != nil {
			return 0, err
		}
	}
}

// settlePoll spaces the offset listings of SettledEnd (no jitter needed:
// its ceiling is used as a plain growing interval).
var settlePoll = backoff.Policy{Min: 10 * time.Millisecond, Max: 500 * time.Millisecond}

// readUntil consumes partition p of each topic in ends, read_committed,
// from its start up to the topic's end offset, feeding data records to t.
// Control records are kept, so the position is known exactly even when a
// partition ends with a transaction marker: the end is reached when a
// record at or past end-1 has been seen, never guessed from idle polls.
// Records at or past end-1 are always present: end is a high watermark
// (SettledEnd), the log's last offset, which is in the active segment that
// compaction never cleans; retention can delete it only by moving the log
// start past it, which an idle poll checks.
func readUntil(ctx context.Context, group *kgo.Client, ends map[string]int64, p int32, t Task, log *slog.Logger, extra []kgo.Opt) (restored, error) {
	parts := map[string]map[int32]kgo.Offset{}
	for topic := range ends {
		parts[topic] = map[int32]kgo.Offset{p: kgo.NewOffset().AtStart()}
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(group.OptValue(kgo.SeedBrokers).([]string)...),
		kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}
	opts = append(opts, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return restored{}, fmt.Errorf("restore client: %w", err)
	}
	defer cl.Close()

	var res restored
	pos := map[string]int64{}
	left := len(ends)
	began, logged := time.Now(), time.Now()
	for left > 0 {
		if time.Since(logged) >= restoreLogEvery {
			// The progress of a long restore, a line at a time (the
			// stage's stderr is its log, where no bar is redrawn).
			logged = time.Now()
			var behind int64
			for topic, end := range ends {
				behind += max(0, end-pos[topic])
			}
			log.Info("restoring partition", "partition", p, "records", res.records, "offsets_left", behind,
				"elapsed", time.Since(began).Round(time.Second))
		}
		pollCtx, cancel := context.WithTimeout(ctx, restoreIdlePoll)
		fetches := cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		var ferr error
		fetches.EachError(func(topic string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && ferr == nil {
				ferr = fmt.Errorf("restore %s/%d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return res, ferr
		}
		if fetches.NumRecords() == 0 {
			// Nothing for restoreIdlePoll: the only way the end can be gone is
			// retention moving the log start past it.
			for topic, end := range ends {
				if pos[topic] >= end {
					continue
				}
				start, err := listOffset(ctx, group, topic, p, 0, -2)
				if err != nil {
					return res, err
				}
				if start >= end {
					pos[topic] = end
					left--
					continue
				}
				log.Warn("restore is waiting for changelog records", "topic", topic, "partition", p, "position", pos[topic], "end", end)
			}
			continue
		}
		var rerr error
		fetches.EachRecord(func(rec *kgo.Record) {
			end := ends[rec.Topic]
			if rerr != nil || pos[rec.Topic] >= end {
				return
			}
			if rec.Offset < end {
				if rec.Attrs.IsControl() {
					if isCommitMarker(rec) {
						res.committedState = true
					}
				} else {
					if err := t.Restore(rec); err != nil {
						rerr = fatal(fmt.Errorf("restore %s/%d@%d: %w", rec.Topic, p, rec.Offset, err))
						return
					}
					res.records++
					res.committedState = true
				}
			}
			pos[rec.Topic] = rec.Offset + 1
			if pos[rec.Topic] >= end {
				left--
			}
		})
		if rerr != nil {
			return res, rerr
		}
	}
	return res, nil
}

// isCommitMarker reports whether a control record is a transaction's
// commit marker (key: version int16, type int16; type 1 is commit).
func isCommitMarker(rec *kgo.Record) bool {
	return len(rec.Key) >= 4 && binary.BigEndian.Uint16(rec.Key[2:4]) == 1
}

// awaitStableOffsets blocks until no transaction holds a pending offset
// commit for the group's input partition p, and returns the committed
// offset (-1 when the group has none). Every transaction that commits
// input offsets also writes its changelog records; SettledEnd then waits
// for those records' markers.
func awaitStableOffsets(ctx context.Context, cl *kgo.Client, group, topic string, p int32) (int64, error) {
	offset := int64(-1)
	err := retrying(ctx, func() error { // UNSTABLE_OFFSET_COMMIT is retriable
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = group
		req.RequireStable = true
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = topic
		rt.Partitions = []int32{p}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return err
				}
				if rp.Partition == p {
					offset = rp.Offset
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("fetch offsets of %s/%d: %w", topic, p, err)
	}
	return offset, nil
}

// listOffset lists one partition's offset: isolation 0 (read_uncommitted)
// or 1 (read_committed), timestamp -1 (the end: the high watermark, or the
// last stable offset under read_committed) or -2 (the log start).
// A retriable error (a leader election, say) is retried until ctx ends.
func listOffset(ctx context.Context, cl *kgo.Client, topic string, p int32, isolation int8, timestamp int64) (int64, error) {
	var o int64
	err := retrying(ctx, func() error {
		offs, err := listOffsets(ctx, cl, topic, isolation, timestamp, p)
		if err != nil {
			return err
		}
		var ok bool
		if o, ok = offs[p]; !ok {
			return fmt.Errorf("list offsets of %s/%d: empty response", topic, p)
		}
		return nil
	})
	return o, err
}

// retrying calls f until it succeeds, fails with an error that is not
// retriable (kerr), or ctx ends; the restore's broker requests go through
// it, so a leader election or a coordinator move delays a restore instead
// of failing the stage.
func retrying(ctx context.Context, f func() error) error {
	for n := 0; ; n++ {
		ferr := f()
		if ferr == nil || !kerr.IsRetriable(ferr) {
			return ferr
		}
		if err := backoff.Sleep(ctx, settlePoll.Ceiling(n)); err != nil {
			return fmt.Errorf("%w (while retrying: %w)", err, ferr)
		}
	}
}

// LastStableOffsets lists the end offsets of a topic's partitions as a
// read_committed consumer sees them (the last stable offsets): records
// below them are committed or aborted, none still open.
func LastStableOffsets(ctx context.Context, cl *kgo.Client, topic string, partitions ...int32) (map[int32]int64, error) {
	return listOffsets(ctx, cl, topic, 1, -1, partitions...)
}

func listOffsets(ctx context.Context, cl *kgo.Client, topic string, isolation int8, timestamp int64, partitions ...int32) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, timestamp, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	offs := make(map[int32]int64, len(partitions))
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return nil, fmt.Errorf("list offsets of %s/%d: %w", topic, rp.Partition, err)
			}
			offs[rp.Partition] = rp.Offset
		}
	}
	return offs, nil
}
