package route

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/reply"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/timers"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// Topics names the topics the stage reads and writes.
type Topics struct {
	Accepted, Decisions, Route, Devices, Preferences string
	// Segments is herald.segments, which group targets read (group.go).
	Segments string
	// Deliveries by channel.
	Deliveries map[string]string
	// Replies is where the answers to waiting callers go (internal/reply),
	// ReplyPartitions its partitions; empty: none are written.
	Replies         string
	ReplyPartitions int32
	// Fallback receives the plans of fallback chains (processors/fallback);
	// empty: the policy has no chain, and the stage writes none.
	Fallback string
}

// TopicsOf returns the route stage's topics in a catalog.
func TopicsOf(c *topics.Catalog) Topics {
	t := Topics{
		Accepted:    c.Name(topics.Accepted),
		Decisions:   c.Name(topics.Decisions),
		Route:       c.Name(topics.Route),
		Devices:     c.Name(topics.Devices),
		Preferences: c.Name(topics.Preferences),
		Segments:    c.Name(topics.Segments),
		Deliveries:  map[string]string{},
		Replies:     c.Name(topics.Replies),
		// Every catalog topic has the catalog's partitions.
		ReplyPartitions: c.Options().Partitions,
		Fallback:        c.Name(topics.Fallback),
	}
	for _, ch := range topics.Channels {
		t.Deliveries[ch] = c.Name(topics.Deliveries(ch))
	}
	return t
}

// outputs are the topics the stage writes besides its changelog: the
// decisions, every channel's deliveries, in topics.Channels' order, the
// replies, and herald.accepted itself (a group notification's members,
// group.go).
func (t Topics) outputs() []string {
	out := []string{t.Decisions, t.Accepted}
	for _, ch := range topics.Channels {
		out = append(out, t.Deliveries[ch])
	}
	if t.Replies != "" {
		out = append(out, t.Replies)
	}
	if t.Fallback != "" {
		out = append(out, t.Fallback)
	}
	return out
}

// Task is the route stage's state for one herald.accepted partition: the
// committed state, the changes of the open transaction and a timer queue.
//
// Timers fire inside the transaction that emits what they release, and the
// tombstone of their entry is part of it: a crash before the commit loses
// nothing (the entry is restored and fires again), after it doubles nothing
// (the entry is gone).
type Task struct {
	policy    Policy
	topics    Topics
	partition int32
	dir       Directory
	// now is the wall-clock part of the timer clock (ms); nil fires timers
	// on stream time only (replay, tests).
	now func() int64

	state   map[string]schemas.RouteEntry
	pending map[string]*schemas.RouteEntry // nil: deleted in this transaction
	timers  timers.Queue                   // a due timer popped in an aborted transaction is due again
	synced  bool                           // dir synced in this transaction
	// groupsSynced: every partition of dir synced in this transaction
	// (before a group is resolved, group.go).
	groupsSynced bool

	streamTime, pendingStreamTime int64

	// replyTo is the reply partition the notification being decided asks
	// for (internal/reply), -1 for none.
	replyTo int32

	// decisions counts the transaction's decisions (nil: not counted).
	decisions *metrics.Tally
	// RecordFormat: how decisions are written (see Options.RecordFormat).
	RecordFormat schemas.Format
}

var _ stage.Task = (*Task)(nil)

// NewTask returns the empty task of one partition. now, when not nil, is
// the wall clock minus the grace period (see the package doc).
func NewTask(p Policy, t Topics, partition int32, dir Directory, now func() int64) *Task {
	return &Task{policy: p, topics: t, partition: partition, dir: dir, now: now, replyTo: -1,
		state: map[string]schemas.RouteEntry{}, pending: map[string]*schemas.RouteEntry{}}
}

// Len is the number of committed state entries.
func (t *Task) Len() int { return len(t.state) }

// Entry returns the state under key as the task sees it (pending changes
// included), for the API's explain and tests.
func (t *Task) Entry(key string) (schemas.RouteEntry, bool) { return t.lookup(key) }

// Restore implements stage.Task.
func (t *Task) Restore(r *kgo.Record) error {
	key := string(r.Key)
	if r.Value == nil {
		delete(t.state, key)
		return nil
	}
	var e schemas.RouteEntry
	if err := schemas.Decode(r.Value, &e); err != nil {
		return fmt.Errorf("route: restore state key %q: %w", key, err)
	}
	t.state[key] = e
	t.timers.Add(key, e.DueAt)
	return nil
}

func (t *Task) lookup(key string) (schemas.RouteEntry, bool) {
	if e, ok := t.pending[key]; ok {
		if e == nil {
			return schemas.RouteEntry{}, false
		}
		return *e, true
	}
	e, ok := t.state[key]
	return e, ok
}

// Process implements stage.Task.
func (t *Task) Process(r *kgo.Record, out *stage.Out) error {
	at := r.Timestamp.UnixMilli()
	src := Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	var n schemas.Accepted
	if err := schemas.Decode(r.Value, &n); err != nil {
		d := decision(schemas.Accepted{}, at, src, "route/"+src.Topic+"/"+fmt.Sprint(src.Partition)+"/"+fmt.Sprint(src.Offset))
		d.Outcome, d.Detail = schemas.DecisionRejected, err.Error()
		return t.emit(Result{Decisions: []schemas.Decision{d}}, at, out)
	}
	if !t.synced {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := t.dir.Sync(ctx, t.partition)
		cancel()
		if err != nil {
			// The broker out of reach: a new session syncs again.
			return stage.Transient(fmt.Errorf("route: partition %d: %w", t.partition, err))
		}
		t.synced = true
	}
	g, isGroup := ParseGroup(n.Recipient)
	var res Result
	if isGroup {
		var err error
		if res, err = t.fanOut(n, g, at, src); err != nil {
			return err
		}
	}
	if reply.IsExplain(r) {
		return t.explain(r, n, at, src, res, isGroup, out)
	}
	t.pendingStreamTime = max(t.pendingStreamTime, at)
	if err := t.fire(t.pendingStreamTime, out); err != nil {
		return err
	}
	if !isGroup {
		res = t.policy.Decide(n, at, src, t.lookup, t.dir.Recipient(n.Tenant, n.Recipient))
	}
	// Answer a waiting caller (internal/reply); timers fired above do not.
	if p, ok := reply.Partition(r, t.topics.ReplyPartitions); ok && t.topics.Replies != "" {
		t.replyTo = p
		defer func() { t.replyTo = -1 }()
	}
	return t.emit(res, at, out)
}

// explain answers an explain (internal/reply.ExplainRoute): the
// notification's decision the stage would make at the record's time, over
// its state with the open transaction's changes, written to the reply
// partition only. It changes nothing: no decision, state, delivery command
// or timer, and the stream time does not move. Timers due by then would
// have fired before the decision: an entry due at or before it is read as
// gone. An explain that names no reply partition is dropped.
//
// A group notification's explain answers its fan-out decision (res, the
// members it would reach), without writing their notifications.
func (t *Task) explain(r *kgo.Record, n schemas.Accepted, at int64, src Source, res Result, isGroup bool, out *stage.Out) error {
	p, ok := reply.Partition(r, t.topics.ReplyPartitions)
	if !ok || t.topics.Replies == "" {
		return nil
	}
	lookup := func(key string) (schemas.RouteEntry, bool) {
		e, ok := t.lookup(key)
		return e, ok && e.DueAt > at
	}
	if !isGroup {
		res = t.policy.Decide(n, at, src, lookup, t.dir.Recipient(n.Tenant, n.Recipient))
	}
	for i := range res.Decisions {
		d := &res.Decisions[i]
		if d.Channel != "" {
			continue
		}
		d.Schema = t.RecordFormat.DecisionSchema()
		rec, err := record(t.topics.Replies, d.NotificationID, d, at)
		if err != nil {
			return err
		}
		rec.Partition = p
		out.Emit(rec)
	}
	return nil
}

// fanOut resolves group g over the directory, synced on every partition
// first (once per transaction), and returns the fan-out decision
// (group.go). A directory that resolves no groups (Groups not
// implemented) knows no members: the group reaches no one.
func (t *Task) fanOut(n schemas.Accepted, g Group, at int64, src Source) (Result, error) {
	gs, ok := t.dir.(Groups)
	if !ok {
		return t.policy.FanOut(n, g, at, src, nil, g.Kind != GroupSegment), nil
	}
	if !t.groupsSynced {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := gs.SyncGroups(ctx)
		cancel()
		if err != nil {
			return Result{}, stage.Transient(fmt.Errorf("route: partition %d: group %s: %w", t.partition, GroupRecipient(g), err))
		}
		t.groupsSynced = true
	}
	members, known := gs.Members(n.Tenant, g)
	return t.policy.FanOut(n, g, at, src, members, known), nil
}

// Tick implements stage.Task: timers due on the task's clock fire.
func (t *Task) Tick(out *stage.Out) {
	clock := t.pendingStreamTime
	if t.now != nil {
		clock = max(clock, t.now())
	}
	// Tick cannot fail the stage; an encoding error cannot happen for
	// records built from decoded ones.
	_ = t.fire(clock, out)
}

// fire releases every timer due at or before clock.
func (t *Task) fire(clock int64, out *stage.Out) error {
	for it, ok := t.timers.Due(clock); ok; it, ok = t.timers.Due(clock) {
		e, ok := t.lookup(it.Key)
		if !ok || e.DueAt != it.At {
			continue // replaced or already deleted: a newer item covers it
		}
		var who Recipient
		if e.Kind == schemas.RouteDigest {
			who = t.dir.Recipient(e.Tenant, e.Recipient)
		}
		if err := t.emit(t.policy.Fire(it.Key, e, who), e.DueAt, out); err != nil {
			return err
		}
	}
	return nil
}

func (t *Task) emit(res Result, at int64, out *stage.Out) error {
	for i := range res.Decisions {
		d := &res.Decisions[i]
		d.Schema = t.RecordFormat.DecisionSchema()
		r, err := record(t.topics.Decisions, d.NotificationID, d, at)
		if err != nil {
			return err
		}
		out.Emit(r)
		if t.replyTo >= 0 && d.Channel == "" {
			// The notification's decision (not a channel's), in the
			// decision's transaction.
			out.Emit(reply.Of(r, t.topics.Replies, t.replyTo))
		}
		t.decisions.Add(d.Tenant, d.Type, d.Outcome)
	}
	for _, c := range res.State {
		prev, had := t.lookup(c.Key)
		r := &kgo.Record{Topic: t.topics.Route, Key: []byte(c.Key), Partition: t.partition, Timestamp: time.UnixMilli(at)}
		if c.Entry != nil {
			var err error
			if r, err = record(t.topics.Route, c.Key, c.Entry, at); err != nil {
				return err
			}
			r.Partition = t.partition
			if !had || prev.DueAt != c.Entry.DueAt {
				// Queued now so it can fire within this transaction; an
				// abort leaves a stale item that fire skips.
				t.timers.Add(c.Key, c.Entry.DueAt)
			}
		}
		out.Emit(r)
		t.pending[c.Key] = c.Entry
	}
	for i := range res.Accepted {
		c := &res.Accepted[i]
		c.Schema = t.RecordFormat.AcceptedSchema()
		r, err := record(t.topics.Accepted, schemas.RecipientKey(c.Tenant, c.Recipient), c, at)
		if err != nil {
			return err
		}
		out.Emit(r)
	}
	if res.Fallback != nil {
		if t.topics.Fallback == "" {
			return fmt.Errorf("route: a fallback plan for %s and no fallback topic", res.Fallback.NotificationID)
		}
		r, err := record(t.topics.Fallback, res.Fallback.NotificationID, res.Fallback, at)
		if err != nil {
			return err
		}
		out.Emit(r)
	}
	for i := range res.Commands {
		c := &res.Commands[i]
		topic, ok := t.topics.Deliveries[c.Channel]
		if !ok {
			return fmt.Errorf("route: no delivery topic for channel %q", c.Channel)
		}
		r, err := record(topic, c.DeliveryID, c, at)
		if err != nil {
			return err
		}
		out.Emit(r)
	}
	return nil
}

// Commit implements stage.Task.
func (t *Task) Commit() {
	for k, e := range t.pending {
		if e == nil {
			delete(t.state, k)
			continue
		}
		t.state[k] = *e
	}
	clear(t.pending)
	t.timers.Commit()
	t.streamTime = t.pendingStreamTime
	t.synced, t.groupsSynced = false, false
	t.decisions.Commit()
}

// Abort implements stage.Task.
func (t *Task) Abort() {
	clear(t.pending)
	t.timers.Abort()
	t.pendingStreamTime = t.streamTime
	t.synced, t.groupsSynced = false, false
	t.decisions.Abort()
}

func record(topic, key string, v schemas.Record, at int64) (*kgo.Record, error) {
	b, err := schemas.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("route: %w", err)
	}
	return &kgo.Record{
		Topic: topic, Key: []byte(key), Value: b, Timestamp: time.UnixMilli(at),
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.NameOf(v))}},
	}, nil
}
