package fallback

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/topics"
)

// ReplayReport is what Replay found.
type ReplayReport struct {
	// Records replayed (plans, outcomes, receipts) and decisions compared
	// with the live ones.
	Records, Compared int
	// Differences, one line each.
	Differences []string
	// Pending: steps the replay decided only at its end, on the wall
	// clock (the live stage fires them on it too).
	Pending int
}

// Replay re-reads herald.fallback through the stage's own Task in a
// sandbox (nothing is produced), steps firing on stream time and, at the
// end of each partition, on the wall clock, and compares each step's
// decision with the live one in herald.decisions, by decision id: outcome
// and detail. A difference is either a defect or the clock hazard of the
// package doc (a receipt read after the live stage's wall clock fired the
// step it would have cancelled).
func Replay(ctx context.Context, brokers []string, cat *topics.Catalog, opts ...kgo.Opt) (*ReplayReport, error) {
	t := TopicsOf(cat)
	input, err := route.ReadAll(ctx, brokers, t.Fallback, opts)
	if err != nil {
		return nil, err
	}
	decided, err := route.ReadAll(ctx, brokers, t.Decisions, opts)
	if err != nil {
		return nil, err
	}
	ds := route.NewReplayedDecisions(t.Decisions, "fallback", decided)
	rep := &ReplayReport{}
	for part, recs := range input {
		var wall int64 // 0 until the end: stream time only
		task := NewTask(t, part, func() int64 { return wall }, 0, nil)
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
		before := len(ds.Replayed)
		wall = time.Now().UnixMilli()
		var out stage.Out
		task.Tick(&out)
		task.Commit()
		if err := ds.Collect(&out); err != nil {
			return nil, err
		}
		rep.Pending += len(ds.Replayed) - before
	}
	rep.Compared, rep.Differences = ds.Compare()
	return rep, nil
}
