package fallback

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/topics"
)

// ReplayReport is what Replay found.
type ReplayReport struct {
	// Records replayed (plans, outcomes, receipts, watermarks) and
	// decisions compared with the live ones.
	Records, Compared int
	// Differences, one line each.
	Differences []string
	// Pending: decisions the replay made from records the live stage had
	// not read when the replay began (past its group's committed offset),
	// and had not made yet: not compared.
	Pending int
}

// Replay re-reads herald.fallback through the stage's own Task in a
// sandbox (nothing is produced) and compares each step's decision with
// the live one in herald.decisions, by decision id: outcome and detail.
// The stage's clock is the forwarders' watermarks, which are records of
// herald.fallback like the plans, outcomes and receipts: the replay reads
// them where the live stage did and fires every step at the same place,
// so any difference is a defect. group is the live stage's consumer group
// ("herald-fallback" by default; empty: every decision is compared): its
// committed offsets, read first, say how far the live stage had read, and
// a decision only the replay made from a record past them is Pending, not
// a difference.
func Replay(ctx context.Context, brokers []string, cat *topics.Catalog, group string, opts ...kgo.Opt) (*ReplayReport, error) {
	t := TopicsOf(cat)
	live := map[int32]int64{}
	if group != "" {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
		if err != nil {
			return nil, fmt.Errorf("fallback: replay client: %w", err)
		}
		offs, err := kadm.NewClient(cl).FetchOffsetsForTopics(ctx, group, t.Fallback)
		cl.Close()
		if errors.Is(err, kerr.GroupIDNotFound) {
			// The live stage never ran (no chains configured): it read
			// nothing, so whatever the replay decides is pending.
			err, offs = nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("fallback: replay: offsets of group %s: %w", group, err)
		}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil {
				live[o.Partition] = o.At
			}
		})
	}
	// Decisions before the input: every decision read was made from input
	// the replay reads.
	decided, err := route.ReadAll(ctx, brokers, t.Decisions, opts)
	if err != nil {
		return nil, err
	}
	input, err := route.ReadAll(ctx, brokers, t.Fallback, opts)
	if err != nil {
		return nil, err
	}
	ds := route.NewReplayedDecisions(t.Decisions, "fallback", decided)
	rep := &ReplayReport{}
	for part, recs := range input {
		task := NewTask(t, part, 0, nil)
		for _, r := range recs {
			var out stage.Out
			if err := task.Process(r, &out); err != nil {
				return nil, fmt.Errorf("fallback: replay %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			task.Tick(&out)
			task.Commit()
			rep.Records++
			if err := ds.Collect(&out); err != nil {
				return nil, err
			}
		}
	}
	if group != "" {
		for id, d := range ds.Replayed {
			if _, ok := ds.Live[id]; !ok && d.SourceTopic == t.Fallback && d.SourceOffset >= live[d.SourcePartition] {
				delete(ds.Replayed, id)
				rep.Pending++
			}
		}
	}
	rep.Compared, rep.Differences = ds.Compare()
	return rep, nil
}
