package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// readUntil consumes topic/p read_committed from its start until it has
// passed offset end-1, feeding data records to t. Control records are kept
// so the position is known even when the log ends with a transaction marker.
func readUntil(ctx context.Context, group *kgo.Client, topic string, p int32, end int64, t Task, extra []kgo.Opt) (int64, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(group.OptValue(kgo.SeedBrokers).([]string)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}
	opts = append(opts, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, fmt.Errorf("restore client: %w", err)
	}
	defer cl.Close()

	var n int64
	idle := 0
	for {
		pollCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fetches := cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) {
			if err != context.DeadlineExceeded && ferr == nil {
				ferr = err
			}
		})
		if ferr != nil {
			return n, fmt.Errorf("restore %s/%d: %w", topic, p, ferr)
		}
		recs := fetches.Records()
		if len(recs) == 0 {
			// The record at end-1 can be gone (compacted away below an
			// open transaction); re-list and give up waiting once the
			// end has stayed put for three idle polls.
			idle++
			now, err := lastStableOffset(ctx, group, topic, p)
			if err != nil {
				return n, err
			}
			if now != end {
				end, idle = now, 0
			} else if idle >= 3 {
				return n, nil
			}
			continue
		}
		idle = 0
		for _, rec := range recs {
			if !rec.Attrs.IsControl() {
				if err := t.Restore(rec); err != nil {
					return n, fmt.Errorf("restore %s/%d@%d: %w", topic, p, rec.Offset, err)
				}
				n++
			}
			if rec.Offset >= end-1 {
				return n, nil
			}
		}
	}
}

// awaitStableOffsets blocks until no transaction holds a pending offset
// commit for the group's input partition p. Every transaction that commits
// input offsets also writes its changelog records, so once the offsets are
// stable, the changelog's last stable offset covers all the state that the
// committed offsets account for; restoring any earlier could miss a
// transaction that commits while we restore.
func awaitStableOffsets(ctx context.Context, cl *kgo.Client, group, topic string, p int32) error {
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = group
		req.RequireStable = true
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = topic
		rt.Partitions = []int32{p}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("fetch offsets of %s/%d: %w", topic, p, err)
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
					err = e
				}
			}
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, kerr.UnstableOffsetCommit), errors.Is(err, kerr.CoordinatorLoadInProgress), errors.Is(err, kerr.NotCoordinator):
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
		default:
			return fmt.Errorf("fetch offsets of %s/%d: %w", topic, p, err)
		}
	}
}
