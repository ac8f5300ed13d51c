package fallback

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/timers"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// Topics names the topics the stage reads and writes.
type Topics struct {
	Fallback, State, Decisions string
	// Deliveries by channel.
	Deliveries map[string]string
}

// TopicsOf returns the fallback stage's topics in a catalog.
func TopicsOf(c *topics.Catalog) Topics {
	t := Topics{Fallback: c.Name(topics.Fallback), State: c.Name(topics.FallbackState), Decisions: c.Name(topics.Decisions),
		Deliveries: map[string]string{}}
	for _, ch := range topics.Channels {
		t.Deliveries[ch] = c.Name(topics.Deliveries(ch))
	}
	return t
}

// outputs are the topics the stage writes besides its changelog.
func (t Topics) outputs() []string {
	out := []string{t.Decisions}
	for _, ch := range topics.Channels {
		out = append(out, t.Deliveries[ch])
	}
	return out
}

// Task is the fallback stage's state for one herald.fallback partition:
// the committed entries and watermarks, the open transaction's changes
// and a timer queue. A timer fires inside the transaction that writes its
// step's commands, decision and the entry that marks it fired: a crash
// before the commit fires it again from the restored entry, after it
// never.
type Task struct {
	topics    Topics
	partition int32
	maxOpen   int64
	log       *slog.Logger

	state   map[string]schemas.Fallback
	pending map[string]*schemas.Fallback // nil: deleted in this transaction
	timers  timers.Queue                 // a due timer popped in an aborted transaction is due again

	// marks are the committed watermarks; pendingMarks, when not nil,
	// this transaction's (written to the changelog by Tick).
	marks, pendingMarks *Watermarks

	// RecordFormat: how decisions are written.
	RecordFormat schemas.Format
	// decisions counts the transaction's decisions (nil: not counted).
	decisions *metrics.Tally
	// lag, when set, is the watermark's lag gauge (seconds behind the
	// wall clock), set by Tick; forget drops it when the partition goes.
	lag    *metrics.Gauge
	forget func()
}

var _ stage.Task = (*Task)(nil)

// NewTask returns the empty task of one partition. maxOpen bounds an
// entry's life (ms; 7 days when not positive).
func NewTask(t Topics, partition int32, maxOpen int64, log *slog.Logger) *Task {
	if maxOpen <= 0 {
		maxOpen = (7 * 24 * time.Hour).Milliseconds()
	}
	if log == nil {
		log = slog.Default()
	}
	return &Task{topics: t, partition: partition, maxOpen: maxOpen, log: log.With("stage", "fallback"),
		state: map[string]schemas.Fallback{}, pending: map[string]*schemas.Fallback{}, marks: &Watermarks{}}
}

// Clock is the partition's clock as the task sees it: the earliest
// watermark (see Watermarks.Clock).
func (t *Task) Clock() int64 { return t.watermarks().Clock() }

func (t *Task) watermarks() *Watermarks {
	if t.pendingMarks != nil {
		return t.pendingMarks
	}
	return t.marks
}

// Len is the number of committed entries.
func (t *Task) Len() int { return len(t.state) }

// Entry returns the entry under a notification id as the task sees it.
func (t *Task) Entry(key string) (schemas.Fallback, bool) {
	e := t.lookup(key)
	if e == nil {
		return schemas.Fallback{}, false
	}
	return *e, true
}

// Restore implements stage.Task: an entry, or the watermarks.
func (t *Task) Restore(r *kgo.Record) error {
	key := string(r.Key)
	if key == watermarksKey {
		t.marks = &Watermarks{}
		if r.Value == nil { // never written: the clock starts again from the forwarders' next marks
			return nil
		}
		var w schemas.FallbackWatermark
		if err := schemas.Decode(r.Value, &w); err != nil {
			return fmt.Errorf("fallback: restore the watermarks: %w", err)
		}
		for _, m := range w.Marks {
			t.marks.Apply(m)
		}
		return nil
	}
	if r.Value == nil {
		delete(t.state, key)
		return nil
	}
	var e schemas.Fallback
	if err := schemas.Decode(r.Value, &e); err != nil {
		return fmt.Errorf("fallback: restore %q: %w", key, err)
	}
	t.state[key] = e
	if _, _, wake := Decide(e, math.MinInt64); wake != 0 {
		t.timers.Add(key, wake)
	}
	return nil
}

func (t *Task) lookup(key string) *schemas.Fallback {
	if e, ok := t.pending[key]; ok {
		return e
	}
	if e, ok := t.state[key]; ok {
		return &e
	}
	return nil
}

// Process implements stage.Task: a plan, an outcome or a receipt of one
// notification, then its pending steps judged on the partition's clock;
// or a forwarder's watermark, which moves the clock: the steps due fire
// then, and once a minute of that clock, entries older than maxOpen are
// dropped, their pending steps cancelled.
func (t *Task) Process(r *kgo.Record, out *stage.Out) error {
	at := r.Timestamp.UnixMilli()
	key := string(r.Key)
	if header(r) == schemas.FallbackWatermarkV1 {
		return t.processMark(r, out)
	}
	prev := t.lookup(key)
	var e schemas.Fallback
	var cancelled []Change
	var nid string
	switch h := header(r); h {
	case schemas.FallbackV1:
		var plan schemas.Fallback
		if err := schemas.Decode(r.Value, &plan); err != nil || plan.PlannedAt == 0 || len(plan.Steps) < 2 {
			t.log.Warn("skip an unreadable plan", "partition", r.Partition, "offset", r.Offset, "err", err)
			return nil
		}
		old := prev
		e, cancelled = ApplyPlan(prev, plan, at)
		if len(cancelled) > 0 {
			if err := t.emitChanges(*old, cancelled, r, out); err != nil {
				return err
			}
		}
		nid = plan.NotificationID
	case schemas.OutcomeV1:
		var o schemas.Outcome
		if err := schemas.Decode(r.Value, &o); err != nil {
			t.log.Warn("skip an undecodable outcome", "partition", r.Partition, "offset", r.Offset, "err", err)
			return nil
		}
		e, nid = ApplyOutcome(prev, o, at), o.NotificationID
	case schemas.ReceiptV1:
		var rc schemas.Receipt
		if err := schemas.Decode(r.Value, &rc); err != nil {
			t.log.Warn("skip an undecodable receipt", "partition", r.Partition, "offset", r.Offset, "err", err)
			return nil
		}
		e, nid = ApplyReceipt(prev, rc, at), rc.NotificationID
	default:
		t.log.Warn("skip a record of another schema", "partition", r.Partition, "offset", r.Offset, "schema", h)
		return nil
	}
	if nid != key {
		t.log.Warn("skip a record under another notification's key", "partition", r.Partition, "offset", r.Offset)
		return nil
	}
	return t.decide(key, e, t.Clock(), r, out)
}

// processMark applies a forwarder's watermark record; when the clock
// moves, the steps due fire, with the record as their source.
func (t *Task) processMark(r *kgo.Record, out *stage.Out) error {
	var w schemas.FallbackWatermark
	if err := schemas.Decode(r.Value, &w); err != nil {
		t.log.Warn("skip an undecodable watermark", "partition", r.Partition, "offset", r.Offset, "err", err)
		return nil
	}
	before := t.Clock()
	next := t.watermarks().Clone()
	changed := false
	for _, m := range w.Marks {
		if next.Apply(m) {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	t.pendingMarks = next
	if clock := next.Clock(); clock > before {
		t.fire(clock, r, out)
		if clock/time.Minute.Milliseconds() > before/time.Minute.Milliseconds() {
			t.sweep(clock, r, out)
		}
	}
	return nil
}

// decide judges e's pending steps at clock, emitting the changes and the
// entry (stamped with src's time), and queues its next timer.
func (t *Task) decide(key string, e schemas.Fallback, clock int64, src *kgo.Record, out *stage.Out) error {
	return t.decideAt(key, e, clock, src, src.Timestamp.UnixMilli(), out)
}

func (t *Task) decideAt(key string, e schemas.Fallback, clock int64, src *kgo.Record, stamp int64, out *stage.Out) error {
	e, changes, wake := Decide(e, clock)
	if err := t.emitChanges(e, changes, src, out); err != nil {
		return err
	}
	if wake != 0 {
		t.timers.Add(key, wake)
	}
	return t.put(key, &e, stamp, out)
}

// emitChanges writes the decision of every change, and the commands of
// the fired steps.
func (t *Task) emitChanges(e schemas.Fallback, changes []Change, src *kgo.Record, out *stage.Out) error {
	for _, c := range changes {
		var d schemas.Decision
		if src != nil {
			d = Decision(e, c, src.Topic, src.Partition, src.Offset)
		} else {
			d = Decision(e, c, "", -1, -1)
		}
		d.Schema = t.RecordFormat.DecisionSchema()
		rec, err := record(t.topics.Decisions, d.NotificationID, &d, c.At)
		if err != nil {
			return err
		}
		out.Emit(rec)
		t.decisions.Add(d.Tenant, d.Type, d.Outcome)
		for i := range c.Commands {
			cmd := &c.Commands[i]
			topic, ok := t.topics.Deliveries[cmd.Channel]
			if !ok {
				return fmt.Errorf("fallback: no delivery topic for channel %q", cmd.Channel)
			}
			rec, err := record(topic, cmd.DeliveryID, cmd, c.At)
			if err != nil {
				return err
			}
			out.Emit(rec)
		}
		t.log.Debug("fallback step", "notification", e.NotificationID, "step", c.Step+1, "state", c.State, "reason", c.Reason)
	}
	return nil
}

// put writes the entry (nil: its tombstone) to the changelog, pending.
func (t *Task) put(key string, e *schemas.Fallback, at int64, out *stage.Out) error {
	r := &kgo.Record{Topic: t.topics.State, Key: []byte(key), Partition: t.partition, Timestamp: time.UnixMilli(at)}
	if e != nil {
		b, err := schemas.Encode(e)
		if err != nil {
			return fmt.Errorf("fallback: encode the entry of %s: %w", key, err)
		}
		r.Value = b
		r.Headers = []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.FallbackV1)}}
	}
	out.Emit(r)
	t.pending[key] = e
	return nil
}

// Tick implements stage.Task: steps due on the partition's clock fire (a
// restored entry's; the others fired when the clock moved), the
// watermarks changed in the transaction are written to the changelog,
// and the lag gauge is set.
func (t *Task) Tick(out *stage.Out) {
	clock := t.Clock()
	t.fire(clock, nil, out)
	if t.pendingMarks != nil {
		b, err := schemas.Encode(&schemas.FallbackWatermark{Marks: t.pendingMarks.Marks()})
		if err == nil { // it cannot fail: a struct of strings and numbers
			out.Emit(&kgo.Record{Topic: t.topics.State, Key: []byte(watermarksKey), Partition: t.partition, Value: b,
				Timestamp: time.UnixMilli(max(clock, 0)), Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.FallbackWatermarkV1)}}})
		}
	}
	if t.lag != nil {
		t.lag.SetFloat(float64(time.Now().UnixMilli()-clock) / 1000)
	}
}

// fire fires the steps due at clock; src is the watermark record that
// moved the clock (nil: a tick).
func (t *Task) fire(clock int64, src *kgo.Record, out *stage.Out) {
	// An encoding error cannot happen for entries built from decoded ones.
	for it, ok := t.timers.Due(clock); ok; it, ok = t.timers.Due(clock) {
		e := t.lookup(it.Key)
		if e == nil || e.Done {
			continue
		}
		if _, _, wake := Decide(*e, math.MinInt64); wake != it.At {
			continue // stale: the entry moved on, a newer item covers it
		}
		_ = t.decideAt(it.Key, *e, clock, src, clock, out)
	}
}

// sweep drops the entries older than maxOpen at clock, cancelling their
// pending steps.
func (t *Task) sweep(clock int64, src *kgo.Record, out *stage.Out) {
	cut := clock - t.maxOpen
	for key, e := range t.state {
		if _, changed := t.pending[key]; changed || e.FirstAt >= cut {
			continue
		}
		if e.PlannedAt == 0 {
			t.log.Warn("dropped a notification's outcomes and receipts whose fallback plan never came", "partition", t.partition, "notification", key)
		}
		e, changes := Cancel(e, clock, "expired: open longer than "+(time.Duration(t.maxOpen)*time.Millisecond).String())
		_ = t.emitChanges(e, changes, src, out)
		_ = t.put(key, nil, clock, out)
	}
}

// Revoked implements stage.Revoker: the lag gauge of a partition no
// longer owned is dropped.
func (t *Task) Revoked() {
	if t.forget != nil {
		t.forget()
	}
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
	if t.pendingMarks != nil {
		t.marks, t.pendingMarks = t.pendingMarks, nil
	}
	t.decisions.Commit()
}

// Abort implements stage.Task.
func (t *Task) Abort() {
	clear(t.pending)
	t.timers.Abort()
	t.pendingMarks = nil
	t.decisions.Abort()
}

func header(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == schemas.HeaderSchema {
			return string(h.Value)
		}
	}
	return ""
}

func record(topic, key string, v schemas.Record, at int64) (*kgo.Record, error) {
	b, err := schemas.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("fallback: %w", err)
	}
	return &kgo.Record{
		Topic: topic, Key: []byte(key), Value: b, Timestamp: time.UnixMilli(at),
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.NameOf(v))}},
	}, nil
}
