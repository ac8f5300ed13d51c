package route

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// ReplayReport is what Replay found.
type ReplayReport struct {
	// Notifications replayed and decisions compared with the live ones.
	Notifications, Compared int
	// Differences, one line each.
	Differences []string
	// Pending timers: digests and deferrals the replay released only at
	// its end (the live stage fires them on the wall clock), compared like
	// the others when the live stage has fired them too.
	Pending int
	// Groups: group notifications (group.go) not re-decided. Their
	// members are resolved over every partition's devices and segments as
	// they stood when the live stage routed them, which the replay's
	// per-partition sandbox does not hold; the members' notifications the
	// live stage wrote are in herald.accepted and are replayed and
	// compared as every other.
	Groups int
}

// Replay re-decides every notification of herald.accepted with the route
// stage's own Task in a sandbox (nothing is produced) and compares each
// decision with the live one in herald.decisions, by decision id: outcome,
// channel and detail.
//
// Devices and preferences are applied in record-time order with the
// notifications of their partition (a change stamped at or before a
// notification's time is seen by it), as the live stage sees them when
// producers' clocks agree (see the package doc). Timers fire on stream
// time, and those still pending at the end of the log fire as the live
// stage's wall clock would by now. The policy must be the live stage's: a
// different one shows up as differences.
func Replay(ctx context.Context, brokers []string, cat *topics.Catalog, p Policy, opts ...kgo.Opt) (*ReplayReport, error) {
	t := TopicsOf(cat)
	read := func(topic string) (map[int32][]*kgo.Record, error) {
		return ReadAll(ctx, brokers, topic, opts)
	}
	accepted, err := read(t.Accepted)
	if err != nil {
		return nil, err
	}
	devices, err := read(t.Devices)
	if err != nil {
		return nil, err
	}
	prefs, err := read(t.Preferences)
	if err != nil {
		return nil, err
	}
	decided, err := read(t.Decisions)
	if err != nil {
		return nil, err
	}
	ds := NewReplayedDecisions(t.Decisions, "route", decided)
	rep := &ReplayReport{}
	for part, recs := range accepted {
		changes := append(append([]*kgo.Record(nil), devices[part]...), prefs[part]...)
		sort.SliceStable(changes, func(i, j int) bool { return changes[i].Timestamp.Before(changes[j].Timestamp) })
		table := &Table{devicesT: t.Devices, prefsT: t.Preferences, log: slog.Default(),
			devices: map[string]map[string]schemas.Device{}, prefs: map[string]schemas.Preferences{}}
		var wall int64 // 0 until the end: stream time only
		task := NewTask(p, t, part, sandbox{table}, func() int64 { return wall })
		next := 0
		for _, r := range recs {
			for ; next < len(changes) && !changes[next].Timestamp.After(r.Timestamp); next++ {
				table.apply(changes[next])
			}
			var n schemas.Accepted
			if schemas.Decode(r.Value, &n) == nil {
				if _, ok := ParseGroup(n.Recipient); ok {
					rep.Groups++
					delete(ds.Live, "route/"+r.Topic+"/"+strconv.Itoa(int(r.Partition))+"/"+strconv.FormatInt(r.Offset, 10))
					continue
				}
			}
			var out stage.Out
			if err := task.Process(r, &out); err != nil {
				return nil, fmt.Errorf("route: replay %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			task.Commit()
			rep.Notifications++
			if err := ds.Collect(&out); err != nil {
				return nil, err
			}
		}
		for ; next < len(changes); next++ {
			table.apply(changes[next])
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

// ReplayedDecisions are one stage's decisions by decision id: those the
// live stage committed to herald.decisions and those its replay made
// (the replays of the route and fallback stages).
type ReplayedDecisions struct {
	topic          string
	Live, Replayed map[string]schemas.Decision
}

// NewReplayedDecisions holds stageName's decisions of decided (herald.decisions
// read whole), for a replay writing its decisions to topic.
func NewReplayedDecisions(topic, stageName string, decided map[int32][]*kgo.Record) *ReplayedDecisions {
	ds := &ReplayedDecisions{topic: topic, Live: map[string]schemas.Decision{}, Replayed: map[string]schemas.Decision{}}
	for _, recs := range decided {
		for _, r := range recs {
			var d schemas.Decision
			if schemas.Decode(r.Value, &d) == nil && d.Stage == stageName {
				ds.Live[d.DecisionID] = d
			}
		}
	}
	return ds
}

// Collect keeps the decisions a replayed task wrote to out.
func (ds *ReplayedDecisions) Collect(out *stage.Out) error {
	for _, r := range out.Records() {
		if r.Topic != ds.topic {
			continue
		}
		var d schemas.Decision
		if err := schemas.Decode(r.Value, &d); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		ds.Replayed[d.DecisionID] = d
	}
	return nil
}

// Compare compares the replayed decisions with the live ones by id
// (outcome, channel, detail): how many were compared, and every
// difference in one sorted line each, a decision only one side made
// included.
func (ds *ReplayedDecisions) Compare() (compared int, differences []string) {
	ids := make([]string, 0, len(ds.Replayed))
	for id := range ds.Replayed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := ds.Replayed[id]
		l, ok := ds.Live[id]
		if !ok {
			differences = append(differences, fmt.Sprintf("%s: replay decides %s%s (%s), the live stage decided nothing", id, r.Outcome, chanOf(r), r.Detail))
			continue
		}
		compared++
		if l.Outcome != r.Outcome || l.Channel != r.Channel || l.Detail != r.Detail {
			differences = append(differences, fmt.Sprintf("%s: live %s%s (%s), replay %s%s (%s)", id, l.Outcome, chanOf(l), l.Detail, r.Outcome, chanOf(r), r.Detail))
		}
	}
	for id, l := range ds.Live {
		if _, ok := ds.Replayed[id]; !ok {
			differences = append(differences, fmt.Sprintf("%s: the live stage decided %s%s, replay nothing", id, l.Outcome, chanOf(l)))
		}
	}
	sort.Strings(differences)
	return compared, differences
}

func chanOf(d schemas.Decision) string {
	if d.Channel == "" {
		return ""
	}
	return ":" + d.Channel
}

// sandbox is a Directory over a table fed by Replay, never synced with
// Kafka.
type sandbox struct{ t *Table }

func (s sandbox) Recipient(tenant, recipient string) Recipient {
	return s.t.Recipient(tenant, recipient)
}
func (sandbox) Sync(context.Context, int32) error { return nil }

// ReadAll reads every partition of topic, read_committed, up to its last
// stable offset as of the call (the replays of the route and fallback
// stages).
func ReadAll(ctx context.Context, brokers []string, topic string, opts []kgo.Opt) (map[int32][]*kgo.Record, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("route: replay client: %w", err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("route: replay: offsets of %s: %w", topic, err)
	}
	behind := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			behind[o.Partition] = o.Offset
		}
	})
	out := map[int32][]*kgo.Record{}
	for len(behind) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("route: replay: read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) { ferr = fmt.Errorf("route: replay: read %s/%d: %w", topic, p, err) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := behind[r.Partition]
			if !ok {
				return
			}
			if !r.Attrs.IsControl() {
				out[r.Partition] = append(out[r.Partition], r)
			}
			if r.Offset+1 >= end {
				delete(behind, r.Partition)
			}
		})
	}
	return out, nil
}
