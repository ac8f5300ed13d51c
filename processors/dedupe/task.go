package dedupe

import (
	"container/heap"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

// Topics names the topics the stage reads and writes.
type Topics struct {
	Requests, Decisions, Seen, Accepted string
}

// Task is the dedupe stage's state for one requests partition: the
// committed seen-set, the changes of the open transaction, and an expiry
// queue for tombstones.
type Task struct {
	policy    Policy
	topics    Topics
	partition int32

	seen    map[string]schemas.SeenEntry
	pending map[string]*schemas.SeenEntry // nil: deleted in this transaction
	expiry  expiryQueue
	popped  []expiryItem // popped in this transaction, re-queued on abort

	streamTime, pendingStreamTime int64

	// decisions counts the transaction's decisions (nil: not counted).
	decisions *metrics.Tally
}

var _ stage.Task = (*Task)(nil)

// NewTask returns the empty task of one partition.
func NewTask(p Policy, t Topics, partition int32) *Task {
	return &Task{policy: p, topics: t, partition: partition,
		seen: map[string]schemas.SeenEntry{}, pending: map[string]*schemas.SeenEntry{}}
}

// Len is the number of committed seen-set entries.
func (t *Task) Len() int { return len(t.seen) }

// Restore implements stage.Task.
func (t *Task) Restore(r *kgo.Record) error {
	key := string(r.Key)
	if r.Value == nil {
		delete(t.seen, key)
		return nil
	}
	var e schemas.SeenEntry
	if err := schemas.Decode(r.Value, &e); err != nil {
		return fmt.Errorf("dedupe: restore seen-set key %q: %w", key, err)
	}
	t.seen[key] = e
	heap.Push(&t.expiry, expiryItem{key: key, at: e.ExpiresAt})
	t.streamTime = max(t.streamTime, e.FirstAt)
	t.pendingStreamTime = t.streamTime
	return nil
}

func (t *Task) lookup(key string) (schemas.SeenEntry, bool) {
	if e, ok := t.pending[key]; ok {
		if e == nil {
			return schemas.SeenEntry{}, false
		}
		return *e, true
	}
	e, ok := t.seen[key]
	return e, ok
}

// Process implements stage.Task.
func (t *Task) Process(r *kgo.Record, out *stage.Out) error {
	at := r.Timestamp.UnixMilli()
	src := Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	var req schemas.Request
	if err := schemas.Decode(r.Value, &req); err != nil {
		req = schemas.Request{NotificationID: string(r.Key)}
		res := Result{Decision: rejected(req, at, src, err.Error())}
		return t.emit(res, at, out)
	}
	t.pendingStreamTime = max(t.pendingStreamTime, at)
	t.expire(out)
	res := t.policy.Decide(req, at, src, t.lookup)
	if res.AlreadyApplied {
		return nil
	}
	return t.emit(res, at, out)
}

func rejected(req schemas.Request, at int64, src Source, detail string) schemas.Decision {
	return schemas.Decision{
		DecisionID: fmt.Sprintf("dedupe/%s/%d/%d", src.Topic, src.Partition, src.Offset), Stage: "dedupe",
		Outcome: schemas.DecisionRejected, Detail: detail, NotificationID: req.NotificationID, At: at,
		SourceTopic: src.Topic, SourcePartition: src.Partition, SourceOffset: src.Offset,
	}
}

func (t *Task) emit(res Result, at int64, out *stage.Out) error {
	d, err := record(t.topics.Decisions, res.Decision.NotificationID, &res.Decision, at)
	if err != nil {
		return err
	}
	out.Emit(d)
	t.decisions.Add(res.Decision.Tenant, res.Decision.Type, res.Decision.Outcome)
	for _, c := range res.Seen {
		r, err := record(t.topics.Seen, c.Key, c.Entry, at)
		if err != nil {
			return err
		}
		r.Partition = t.partition
		out.Emit(r)
		t.pending[c.Key] = c.Entry
		// Queued now so it can expire within this transaction; an abort
		// leaves a stale item that expire skips.
		heap.Push(&t.expiry, expiryItem{key: c.Key, at: c.Entry.ExpiresAt})
	}
	if res.Accepted != nil {
		r, err := record(t.topics.Accepted, schemas.RecipientKey(res.Accepted.Tenant, res.Accepted.Recipient), res.Accepted, at)
		if err != nil {
			return err
		}
		out.Emit(r)
	}
	return nil
}

// Tick implements stage.Task. The dedupe stage has no wall-clock timers:
// expiry runs on stream time inside Process, so decisions never depend on
// how records were batched.
func (t *Task) Tick(*stage.Out) {}

// expire tombstones entries whose expiry the partition's stream time (the
// newest record time so far, this record's included) has passed by the
// policy's skew allowance.
func (t *Task) expire(out *stage.Out) {
	now := t.pendingStreamTime - t.policy.SkewAllowanceMs
	for t.expiry.Len() > 0 && t.expiry[0].at <= now {
		it := heap.Pop(&t.expiry).(expiryItem)
		t.popped = append(t.popped, it)
		e, ok := t.lookup(it.key)
		if !ok || e.ExpiresAt != it.at {
			continue // replaced or already deleted: a newer item covers it
		}
		out.Emit(&kgo.Record{Topic: t.topics.Seen, Key: []byte(it.key), Partition: t.partition})
		t.pending[it.key] = nil
	}
}

// Commit implements stage.Task.
func (t *Task) Commit() {
	for k, e := range t.pending {
		if e == nil {
			delete(t.seen, k)
			continue
		}
		t.seen[k] = *e
	}
	clear(t.pending)
	t.popped = t.popped[:0]
	t.streamTime = t.pendingStreamTime
	t.decisions.Commit()
}

// Abort implements stage.Task.
func (t *Task) Abort() {
	clear(t.pending)
	for _, it := range t.popped {
		heap.Push(&t.expiry, it)
	}
	t.popped = t.popped[:0]
	t.pendingStreamTime = t.streamTime
	t.decisions.Abort()
}

func record(topic, key string, v schemas.Record, at int64) (*kgo.Record, error) {
	b, err := schemas.Encode(v)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{
		Topic: topic, Key: []byte(key), Value: b, Timestamp: msTime(at),
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(v.SchemaName())}},
	}, nil
}

type expiryItem struct {
	key string
	at  int64
}

type expiryQueue []expiryItem

func (q expiryQueue) Len() int           { return len(q) }
func (q expiryQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q expiryQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *expiryQueue) Push(x any)        { *q = append(*q, x.(expiryItem)) }
func (q *expiryQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}
