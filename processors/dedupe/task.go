package dedupe

import (
	"encoding/hex"
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
// queue for tombstones. Its state holds no pointers per key (see seen.go),
// and the records it emits are carved from slabs it allocates in bulk
// (see out.go), so a request costs few allocations.
type Task struct {
	policy    Policy
	topics    Topics
	partition int32

	seen    seenTable
	strs    map[seenKey]seenStrings // the strings of entries flagged flagStrings
	pending map[seenKey]pendingVal
	expiry  expiryQueue
	popped  []expiryItem // popped in this transaction, re-queued on abort

	streamTime, pendingStreamTime int64

	// decisions counts the transaction's decisions (nil: not counted).
	decisions *metrics.Tally

	out   slab
	dec   schemas.Decoder   // for Restore
	entry schemas.SeenEntry // Restore's, kept here so it does not escape
	fx    effects
	req   schemas.Request
	draft struct { // records being encoded, kept here so they do not escape
		seen     schemas.SeenEntry
		accepted schemas.Accepted
	}
}

// pendingVal is a change of the open transaction: an entry set, or
// deleted.
type pendingVal struct {
	val     seenVal
	strs    seenStrings
	deleted bool
}

var _ stage.Task = (*Task)(nil)

// NewTask returns the empty task of one partition.
func NewTask(p Policy, t Topics, partition int32) *Task {
	return &Task{policy: p, topics: t, partition: partition,
		seen: newSeenTable(), strs: map[seenKey]seenStrings{}, pending: map[seenKey]pendingVal{}}
}

// Len is the number of committed seen-set entries.
func (t *Task) Len() int { return t.seen.len() }

// Restore implements stage.Task. A value that is not a seen entry fails the
// restore; an entry under a key in neither of the stage's forms
// ("idem/<id>", "dedupe/<id>") is skipped, as no request can look it up.
func (t *Task) Restore(r *kgo.Record) error {
	k, ok := parseSeenKey(r.Key)
	if r.Value == nil {
		t.seen.delete(k)
		delete(t.strs, k)
		return nil
	}
	e := &t.entry // its strings point into r.Value: valOf copies what it keeps
	if err := t.dec.DecodeShared(r.Value, e); err != nil {
		return fmt.Errorf("dedupe: restore seen-set key %q: %w", r.Key, err)
	}
	if !ok {
		return nil
	}
	v, s := valOf(e)
	t.seen.set(k, v)
	if v.flags&flagStrings != 0 {
		t.strs[k] = s
	} else {
		delete(t.strs, k)
	}
	t.expiry.push(expiryItem{key: k, at: v.expiresAt})
	t.streamTime = max(t.streamTime, v.firstAt)
	t.pendingStreamTime = t.streamTime
	return nil
}

// get implements seenStore: the open transaction's changes over the
// committed seen-set.
func (t *Task) get(k seenKey) (seenVal, seenStrings, bool) {
	if p, ok := t.pending[k]; ok {
		return p.val, p.strs, !p.deleted
	}
	v, ok := t.seen.get(k)
	if ok && v.flags&flagStrings != 0 {
		return v, t.strs[k], true
	}
	return v, seenStrings{}, ok
}

func (t *Task) hexString(id *[16]byte) string {
	return t.out.text(hex.AppendEncode(t.out.reserve(textRoom), id[:]))
}

func (t *Task) decisionID(src Source) string {
	return t.out.text(appendDecisionID(t.out.reserve(textRoom), src))
}

// Process implements stage.Task.
func (t *Task) Process(r *kgo.Record, out *stage.Out) error {
	at := r.Timestamp.UnixMilli()
	src := Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	req := &t.req
	*req = schemas.Request{}
	if err := t.dec.Decode(r.Value, req); err != nil {
		*req = schemas.Request{NotificationID: string(r.Key)}
		d := rejected(*req, at, src, err.Error())
		return t.emitDecision(&d, at, out)
	}
	t.pendingStreamTime = max(t.pendingStreamTime, at)
	t.expire(out)
	t.policy.decide(req, at, src, t, &t.fx)
	if t.fx.applied {
		return nil
	}
	return t.emit(req, at, out)
}

func rejected(req schemas.Request, at int64, src Source, detail string) schemas.Decision {
	return schemas.Decision{
		DecisionID: string(appendDecisionID(nil, src)), Stage: "dedupe",
		Outcome: schemas.DecisionRejected, Detail: detail, NotificationID: req.NotificationID, At: at,
		SourceTopic: src.Topic, SourcePartition: src.Partition, SourceOffset: src.Offset,
	}
}

func (t *Task) emitDecision(d *schemas.Decision, at int64, out *stage.Out) error {
	rec, err := t.out.record(t.topics.Decisions, d.NotificationID, d, decisionHeaders, at)
	if err != nil {
		return err
	}
	out.Emit(rec)
	t.decisions.Add(d.Tenant, d.Type, d.Outcome)
	return nil
}

func (t *Task) emit(req *schemas.Request, at int64, out *stage.Out) error {
	fx := &t.fx
	if err := t.emitDecision(&fx.decision, at, out); err != nil {
		return err
	}
	content := ""
	if fx.hasSum {
		content = t.out.text(hex.AppendEncode(t.out.reserve(textRoom), fx.sum[:]))
	}
	for i := range fx.n {
		c := &fx.changes[i]
		key := c.key.appendKey(t.out.reserve(textRoom))
		scope := t.out.text(key[len(key)-32:])
		t.draft.seen = c.entry(req, scope, content)
		r, err := t.out.recordKey(t.topics.Seen, key, &t.draft.seen, seenHeaders, at)
		if err != nil {
			return err
		}
		r.Partition = t.partition
		out.Emit(r)
		t.pending[c.key] = pendingVal{val: c.val, strs: c.strs}
		// Queued now so it can expire within this transaction; an abort
		// leaves a stale item that expire skips.
		t.expiry.push(expiryItem{key: c.key, at: c.val.expiresAt})
	}
	if fx.accepted {
		t.draft.accepted = acceptedOf(req, at)
		key := schemas.AppendRecipientKey(t.out.reserve(textRoom), req.Tenant, req.Recipient)
		r, err := t.out.recordKey(t.topics.Accepted, key, &t.draft.accepted, acceptedHeaders, at)
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
	for len(t.expiry) > 0 && t.expiry[0].at <= now {
		it := t.expiry.pop()
		t.popped = append(t.popped, it)
		v, _, ok := t.get(it.key)
		if !ok || v.expiresAt != it.at {
			continue // replaced or already deleted: a newer item covers it
		}
		r := t.out.newRecord()
		r.Topic, r.Key, r.Partition = t.topics.Seen, t.out.bytes(it.key.appendKey(t.out.reserve(textRoom))), t.partition
		out.Emit(r)
		t.pending[it.key] = pendingVal{deleted: true}
	}
}

// Commit implements stage.Task.
func (t *Task) Commit() {
	for k, p := range t.pending {
		if p.deleted {
			t.seen.delete(k)
			delete(t.strs, k)
			continue
		}
		t.seen.set(k, p.val)
		if p.val.flags&flagStrings != 0 {
			t.strs[k] = p.strs
		} else {
			delete(t.strs, k)
		}
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
		t.expiry.push(it)
	}
	t.popped = t.popped[:0]
	t.pendingStreamTime = t.streamTime
	t.decisions.Abort()
}

// expiryItem is one queued expiry: the key and the expiry it had when
// queued (an item whose key has since changed is stale and skipped).
type expiryItem struct {
	at  int64
	key seenKey
}

// expiryQueue is a binary min-heap of expiry items by time, without the
// boxing of container/heap.
type expiryQueue []expiryItem

func (q *expiryQueue) push(it expiryItem) {
	h := append(*q, it)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].at <= h[i].at {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
	*q = h
}

func (q *expiryQueue) pop() expiryItem {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].at < h[least].at {
			least = l
		}
		if r < len(h) && h[r].at < h[least].at {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*q = h
	return top
}
