package fallback

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
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
	live := map[string]schemas.Decision{}
	for _, recs := range decided {
		for _, r := range recs {
			var d schemas.Decision
			if schemas.Decode(r.Value, &d) == nil && d.Stage == "fallback" {
				live[d.DecisionID] = d
			}
		}
	}
	rep := &ReplayReport{}
	replayed := map[string]schemas.Decision{}
	collect := func(out *stage.Out) error {
		for _, r := range out.Records() {
			if r.Topic != t.Decisions {
				continue
			}
			var d schemas.Decision
			if err := schemas.Decode(r.Value, &d); err != nil {
				return fmt.Errorf("fallback: replay: %w", err)
			}
			replayed[d.DecisionID] = d
		}
		return nil
	}
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
			if err := collect(&out); err != nil {
				return nil, err
			}
		}
		before := len(replayed)
		wall = time.Now().UnixMilli()
		var out stage.Out
		task.Tick(&out)
		task.Commit()
		if err := collect(&out); err != nil {
			return nil, err
		}
		rep.Pending += len(replayed) - before
	}
	ids := make([]string, 0, len(replayed))
	for id := range replayed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := replayed[id]
		l, ok := live[id]
		if !ok {
			rep.Differences = append(rep.Differences, fmt.Sprintf("%s: replay decides %s (%s), the live stage decided nothing", id, r.Outcome, r.Detail))
			continue
		}
		rep.Compared++
		if l.Outcome != r.Outcome || l.Detail != r.Detail {
			rep.Differences = append(rep.Differences, fmt.Sprintf("%s: live %s (%s), replay %s (%s)", id, l.Outcome, l.Detail, r.Outcome, r.Detail))
		}
	}
	for id, l := range live {
		if _, ok := replayed[id]; !ok {
			rep.Differences = append(rep.Differences, fmt.Sprintf("%s: the live stage decided %s (%s), replay nothing", id, l.Outcome, l.Detail))
		}
	}
	sort.Strings(rep.Differences)
	return rep, nil
}
