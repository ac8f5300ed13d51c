package dedupe

import (
	"encoding/hex"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/reply"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/schemas/seenpb"
)

// Topics names the topics the stage reads and writes.
type Topics struct {
	Requests, Decisions, Seen, Accepted string
	// Replies is where the answers to waiting callers go (internal/reply);
	// empty: none are written (a replay's sandbox). ReplyPartitions is its
	// number of partitions: a request naming another is not answered.
	Replies         string
	ReplyPartitions int32
}

// Task is the dedupe stage's state for one requests partition: the
// committed seen-set (a packed table per kind of key, see seentable.go),
// the changes of the open transaction, and expiry queues for tombstones
// (see expiry.go). Its state holds no pointers per key, and the records it
// emits are carved from a slab of chunks reused from one transaction to
// the next (see out.go), so a request costs few allocations and leaves
// little for the garbage collector.
type Task struct {
	policy    Policy
	topics    Topics
	partition int32

	seen   [2]*seenTable     // by kind: kindIdem-1, kindDedupe-1
	queued [2]queue[posItem] // the expiries of seen, by kind
	// The open transaction's changes: one per key, in the order each key
	// was first changed, indexed by pending. The values are in a slice,
	// not in the map: a map's values of more than 128 bytes are allocated
	// one by one, and the map holds no pointers for the collector.
	pending map[seenKey]int32
	changes []pendingChange
	pendQ   queue[expiryItem] // the expiries of pending
	popped  []poppedItem      // popped from queued in this transaction, re-queued on abort

	streamTime, pendingStreamTime int64
	// sweptTo is the sweep time: every entry expiring at or before it is
	// deleted (the stream time less the skew allowance, never moving back;
	// restored from herald.seen, see batch.go). pendingSweptTo is the open
	// transaction's.
	sweptTo, pendingSweptTo int64
	// unsettled: restored entries may expire at or before sweptTo; they
	// are deleted before anything else reads the seen-set (settle).
	unsettled bool

	// The batched layout (batch.go): the live buckets, the bucket records
	// being filled in the open transaction (open, by end in openIdx), the
	// buffers of records emitted in it (used) and the free ones.
	bk                 buckets
	open               []openBucket
	openIdx            map[int64]int32
	usedBufs, freeBufs [][]byte
	// txnChanged: the open transaction deleted entries, tombstoned a
	// bucket or wrote a bucket record before its last request, so its
	// final times must be written (a bucket record or the clock).
	txnChanged bool

	// replyTo is the reply partition the record being processed asks for
	// (internal/reply), -1 for none.
	replyTo int32

	// decisions counts the transaction's decisions (nil: not counted).
	decisions *metrics.Tally
	// SeenJSON: write herald.seen entries as JSON (herald.seen/v1), not
	// herald.seen/v2 (see Options.SeenJSON). Restore reads both.
	SeenJSON bool
	// SeenPerKey: write a record a key (herald.seen/v2, or v1 with
	// SeenJSON), not bucket records (herald.seen/v3; see Options.SeenPerKey).
	// Restore reads every layout.
	SeenPerKey bool
	// RecordFormat: how decisions and accepted notifications are written
	// (see Options.RecordFormat).
	RecordFormat schemas.Format

	out    slab
	dec    schemas.Decoder  // for Process's requests
	seenRd seenReader       // for Restore
	batchM seenpb.SeenEntry // for Restore's bucket records
	fx     effects
	req    schemas.Request
	draft  struct { // records being encoded, kept here so they do not escape
		seen     schemas.SeenEntry
		seenV2   seenpb.SeenEntry
		accepted schemas.Accepted
	}
}

// pendingVal is a change of the open transaction: an entry set, or
// deleted.
type pendingVal struct {
	val     seenVal
	strs    seenStrings
	deleted bool
	// logged: the key was written to a bucket record in this transaction
	// (kept when a later change replaces this one).
	logged bool
}

// pendingChange is the open transaction's latest change of a key.
type pendingChange struct {
	key seenKey
	pendingVal
}

// poppedItem is an item popped from queued[kind-1].
type poppedItem struct {
	kind seenKind
	item posItem
}

var _ stage.Task = (*Task)(nil)

// NewTask returns the empty task of one partition.
func NewTask(p Policy, t Topics, partition int32) *Task {
	return &Task{policy: p, topics: t, partition: partition,
		seen:    [2]*seenTable{newSeenTable(partition, true), newSeenTable(partition, false)},
		pending: map[seenKey]int32{}}
}

// Len is the number of committed seen-set entries.
func (t *Task) Len() int {
	t.settle()
	return t.seen[0].len() + t.seen[1].len()
}

// perKey reports whether the task writes the per-key layout.
func (t *Task) perKey() bool { return t.SeenPerKey || t.SeenJSON }

// settle deletes the restored entries that expire at or before the
// restored sweep time (see "Restore" in batch.go). Their queued items are
// then stale and skipped.
func (t *Task) settle() {
	if !t.unsettled {
		return
	}
	t.unsettled = false
	t.seen[0].sweep(t.sweptTo)
	t.seen[1].sweep(t.sweptTo)
}

// table is the committed table of a kind.
func (t *Task) table(kind seenKind) *seenTable { return t.seen[kind-1] }

// setPending notes a change of the open transaction.
func (t *Task) setPending(k seenKey, p pendingVal) {
	if i, ok := t.pending[k]; ok {
		p.logged = p.logged || t.changes[i].logged
		t.changes[i].pendingVal = p
		return
	}
	t.pending[k] = int32(len(t.changes))
	t.changes = append(t.changes, pendingChange{key: k, pendingVal: p})
}

// dropPending forgets the open transaction's changes.
func (t *Task) dropPending() {
	clear(t.pending)
	clear(t.changes) // their strings are not kept alive until overwritten
	t.changes = t.changes[:0]
}

// Restore implements stage.Task. A value that is not a seen entry fails the
// restore; an entry under a key in neither of the stage's forms
// ("idem/<id>", "dedupe/<id>") is skipped, as no request can look it up.
//
// Records of the batched layout (batch.go) set their entries in turn; a
// bucket's tombstone ends the bucket, and the entries of ended buckets are
// deleted by the sweep time the records carry (settle). A per-key
// tombstone deletes its key only when the key's entry is still the one of
// a per-key record.
func (t *Task) Restore(r *kgo.Record) error {
	if end, seq, ok := parseBucketKey(r.Key); ok {
		if r.Value == nil {
			t.bk.dead(end)
			return nil
		}
		t.bk.restored(end, seq)
		return t.restoreBatch(r)
	}
	if string(r.Key) == clockKey {
		if r.Value == nil {
			return nil
		}
		return t.restoreBatch(r)
	}
	k, ok := parseSeenKey(r.Key)
	if r.Value == nil {
		if ok {
			if v, _, found := t.table(k.kind).get(&k.id); found && v.flags&flagPerKey != 0 {
				t.table(k.kind).delete(&k.id)
			}
		}
		return nil
	}
	v, s, err := t.seenRd.read(r.Value)
	if err != nil {
		return fmt.Errorf("dedupe: restore seen-set key %q: %w", r.Key, err)
	}
	if !ok {
		return nil
	}
	v.flags |= flagPerKey
	t.restored(k, v, s, v.firstAt)
	return nil
}

// restored sets a restored entry; streamTime is a stream time the
// partition reached when it was written.
func (t *Task) restored(k seenKey, v seenVal, s seenStrings, streamTime int64) {
	pos := t.table(k.kind).set(&k.id, v, s)
	t.queued[k.kind-1].push(newPosItem(v.expiresAt, pos))
	t.streamTime = max(t.streamTime, streamTime)
	t.pendingStreamTime = t.streamTime
}

// restoreBatch restores a bucket or clock record (herald.seen/v3).
func (t *Task) restoreBatch(r *kgo.Record) error {
	streamTime, sweptTo, err := readBatch(r.Value, &t.batchM, func(m *seenpb.SeenEntry) {
		v, s := valOfV2(m)
		t.restored(keyOfV2(m), v, s, v.firstAt)
	})
	if err != nil {
		return fmt.Errorf("dedupe: restore seen-set key %q: %w", r.Key, err)
	}
	t.streamTime = max(t.streamTime, streamTime)
	t.pendingStreamTime = t.streamTime
	t.sweptTo = max(t.sweptTo, sweptTo)
	t.pendingSweptTo = t.sweptTo
	t.unsettled = true
	return nil
}

// seenReader reads herald.seen values into their memory form, with the
// scratch it keeps between calls (here, not on the stack, so that it does
// not escape). One goroutine uses a reader.
type seenReader struct {
	dec   schemas.Decoder
	entry schemas.SeenEntry // a herald.seen/v1 entry, its strings pointing into the record
	v2    seenpb.SeenEntry  // a herald.seen/v2 entry, its fields pointing into the record
}

// read reads a herald.seen value of either version (see schemas.IsJSON)
// into its memory form: a herald.seen/v2 entry by the generated decoder
// alone, its bytes read in place.
func (rd *seenReader) read(b []byte) (seenVal, seenStrings, error) {
	if schemas.IsJSON(b) {
		e := &rd.entry // its strings point into b: valOf copies what it keeps
		if err := rd.dec.DecodeShared(b, e); err != nil {
			return seenVal{}, seenStrings{}, err
		}
		v, s := valOf(e)
		return v, s, nil
	}
	m := &rd.v2
	m.Reset() // the generated decoder merges into what m holds
	if err := m.UnmarshalVTUnsafe(b); err != nil {
		return seenVal{}, seenStrings{}, fmt.Errorf("decode %s: %w", schemas.SeenEntryV2, err)
	}
	if err := schemas.CheckSeenV2(m); err != nil {
		return seenVal{}, seenStrings{}, err
	}
	v, s := valOfV2(m)
	return v, s, nil
}

// get implements seenStore: the open transaction's changes over the
// committed seen-set.
func (t *Task) get(k seenKey) (seenVal, seenStrings, bool) {
	if i, ok := t.pending[k]; ok {
		p := &t.changes[i]
		return p.val, p.strs, !p.deleted
	}
	return t.table(k.kind).get(&k.id)
}

func (t *Task) hexString(id [16]byte) string {
	return t.out.text(hex.AppendEncode(t.out.reserve(textRoom), id[:]))
}

func (t *Task) decisionID(src Source) string {
	return t.out.text(appendDecisionID(t.out.reserve(textRoom), src))
}

// Process implements stage.Task.
func (t *Task) Process(r *kgo.Record, out *stage.Out) error {
	at := r.Timestamp.UnixMilli()
	src := Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	t.settle()
	t.replyTo = -1
	if p, ok := reply.Partition(r, t.topics.ReplyPartitions); ok && t.topics.Replies != "" {
		t.replyTo = p
	}
	req := &t.req
	*req = schemas.Request{}
	// The request is read in place: its strings point into r.Value, which
	// nobody changes. Assumed of franz-go: without a user buffer pool
	// (kgo.WithPools; herald sets none) each fetched batch's records get a
	// buffer of their own, never reused. What outlives Process is copied
	// where it is kept (a request id that is not an id in the seen-set, see
	// effects.add; the decision counts' labels, see metrics.Decisions);
	// everything else is encoded into the slab before Process returns.
	if err := t.dec.DecodeShared(r.Value, req); err != nil {
		if reply.IsExplain(r) {
			return nil // a dry run that is no request: nothing to answer, nothing to audit
		}
		*req = schemas.Request{NotificationID: string(r.Key)}
		d := rejected(*req, at, src, err.Error())
		return t.emitDecision(&d, at, out)
	}
	if reply.IsExplain(r) {
		return t.explain(r, req, at, src, out)
	}
	t.pendingStreamTime = max(t.pendingStreamTime, at)
	t.expire(out)
	t.policy.decide(req, at, src, t, &t.fx)
	if t.fx.applied {
		return nil
	}
	return t.emit(req, at, out)
}

// explain answers an explain (reply.ExplainHeader): the decision the
// request would get here and now, over the seen-set with the open
// transaction's changes, written to the reply partition only. Nothing else
// is changed, and the stream time does not move, so decisions stay a
// function of the real requests alone (replay skips explains). When the
// explain asks for the route stage's answer too (reply.ExplainsRoute) and
// the request would be accepted, the accepted notification is emitted as
// an explain for the route stage, which answers on the same partition and
// changes nothing either. An explain that names no reply partition is
// dropped: nobody waits for it.
func (t *Task) explain(r *kgo.Record, req *schemas.Request, at int64, src Source, out *stage.Out) error {
	if t.replyTo < 0 {
		return nil
	}
	t.policy.decide(req, at, src, t, &t.fx)
	d := &t.fx.decision
	d.Schema = t.RecordFormat.DecisionSchema()
	rec, err := t.out.record(t.topics.Replies, d.NotificationID, d, t.headers(decisionHeaders, decisionV2Headers), at)
	if err != nil {
		return err
	}
	rec.Partition = t.replyTo
	out.Emit(rec)
	if d.Outcome == schemas.DecisionAccepted && reply.ExplainsRoute(r) {
		// The route stage answers what it would decide, as an explain too.
		hs := reply.AppendHeader(t.headers(acceptedHeaders, acceptedV2Headers), t.replyTo)
		return t.emitAccepted(req, at, append(hs, reply.ExplainRouteHeader()), out)
	}
	return nil
}

func rejected(req schemas.Request, at int64, src Source, detail string) schemas.Decision {
	return schemas.Decision{
		DecisionID: string(appendDecisionID(nil, src)), Stage: "dedupe",
		Outcome: schemas.DecisionRejected, Detail: detail, NotificationID: req.NotificationID, At: at,
		SourceTopic: src.Topic, SourcePartition: src.Partition, SourceOffset: src.Offset,
	}
}

// headers returns the headers of a decision or accepted record in the
// task's RecordFormat: v1's or v2's.
func (t *Task) headers(v1, v2 []kgo.RecordHeader) []kgo.RecordHeader {
	if t.RecordFormat == schemas.FormatJSON {
		return v1
	}
	return v2
}

func (t *Task) emitDecision(d *schemas.Decision, at int64, out *stage.Out) error {
	d.Schema = t.RecordFormat.DecisionSchema()
	rec, err := t.out.record(t.topics.Decisions, d.NotificationID, d, t.headers(decisionHeaders, decisionV2Headers), at)
	if err != nil {
		return err
	}
	out.Emit(rec)
	if t.replyTo >= 0 {
		// The answer to the waiting caller, in the decision's transaction.
		out.Emit(reply.Fill(t.out.newRecord(), rec, t.topics.Replies, t.replyTo))
	}
	t.decisions.Add(d.Tenant, d.Type, d.Outcome)
	return nil
}

func (t *Task) emit(req *schemas.Request, at int64, out *stage.Out) error {
	fx := &t.fx
	if err := t.emitDecision(&fx.decision, at, out); err != nil {
		return err
	}
	if !t.perKey() {
		for i := range fx.n {
			t.setBatched(&fx.changes[i], fx, out)
		}
	} else if err := t.emitPerKey(req, at, out); err != nil {
		return err
	}
	if fx.accepted {
		hs := t.headers(acceptedHeaders, acceptedV2Headers)
		if t.replyTo >= 0 {
			hs = reply.AppendHeader(hs, t.replyTo) // the route stage answers too
		}
		return t.emitAccepted(req, at, hs, out)
	}
	return nil
}

// setBatched sets one entry in the batched layout: written to its
// bucket's record unless already due, the per-key record it replaces (if
// any) tombstoned first.
func (t *Task) setBatched(c *change, fx *effects, out *stage.Out) {
	i, changed := t.pending[c.key]
	if !changed {
		if v, _, ok := t.table(c.key.kind).get(&c.key.id); ok && v.flags&flagPerKey != 0 {
			t.tombstoneKey(c.key, out)
		}
	}
	logged := false
	if c.val.expiresAt > t.pendingSweptTo {
		if changed && t.changes[i].logged {
			// Written already in this transaction, maybe to a bucket record
			// emitted after this entry's: the records so far go first, so a
			// restore reads the key's entries in the order they were set.
			t.flushOpen(out)
		}
		ob := t.openFor(bucketEnd(c.val.expiresAt))
		c.entryV2(&t.draft.seenV2, fx)
		ob.buf = appendBatchEntry(ob.buf, &t.draft.seenV2)
		ob.n++
		if ob.n >= batchEntries || len(ob.buf) >= batchBytes {
			t.flushBucket(ob, out)
			t.txnChanged = true
		}
		logged = true
	}
	t.setPending(c.key, pendingVal{val: c.val, strs: c.strs, logged: logged})
	// Queued now so it can expire within this transaction.
	t.pendQ.push(expiryItem{key: c.key, at: c.val.expiresAt})
}

// tombstoneKey emits the tombstone of k's per-key record.
func (t *Task) tombstoneKey(k seenKey, out *stage.Out) {
	r := t.out.newRecord()
	r.Topic, r.Key, r.Partition = t.topics.Seen, t.out.bytes(k.appendKey(t.out.reserve(textRoom))), t.partition
	out.Emit(r)
}

// openFor returns the open transaction's record of the bucket ending at
// end, opening it if need be.
func (t *Task) openFor(end int64) *openBucket {
	if i, ok := t.openIdx[end]; ok {
		return &t.open[i]
	}
	if t.openIdx == nil {
		t.openIdx = map[int64]int32{}
	}
	t.openIdx[end] = int32(len(t.open))
	t.open = append(t.open, openBucket{end: end, buf: t.newBuf()})
	return &t.open[len(t.open)-1]
}

func (t *Task) newBuf() []byte {
	if n := len(t.freeBufs); n > 0 {
		b := t.freeBufs[n-1]
		t.freeBufs = t.freeBufs[:n-1]
		return b[:0]
	}
	return make([]byte, 0, 4<<10)
}

// flushBucket emits ob's entries as the bucket's next record, with the
// partition's stream and sweep times so far, unless every one of them is
// due by now (the bucket is then tombstoned, or will be before it could
// be restored: see batch.go), and empties ob.
func (t *Task) flushBucket(ob *openBucket, out *stage.Out) bool {
	if ob.n == 0 {
		return false
	}
	if ob.end-1 <= t.pendingSweptTo {
		ob.buf, ob.n = ob.buf[:0], 0
		return false
	}
	seq := t.bk.next(ob.end)
	v := appendBatchTimes(ob.buf, t.pendingStreamTime, t.pendingSweptTo)
	key := t.out.bytes(appendBucketKey(t.out.reserve(textRoom), ob.end, seq))
	r := t.out.recordOf(t.topics.Seen, key, v, seenBatchHeaders, t.pendingStreamTime)
	r.Partition = t.partition
	out.Emit(r)
	t.usedBufs = append(t.usedBufs, v) // the record's until the transaction ends
	ob.buf, ob.n = t.newBuf(), 0
	return true
}

// flushOpen emits every open bucket record with entries and reports
// whether it emitted any.
func (t *Task) flushOpen(out *stage.Out) bool {
	any := false
	for i := range t.open {
		if t.flushBucket(&t.open[i], out) {
			any = true
		}
	}
	return any
}

// endOpen forgets the open transaction's bucket records, reusing their
// buffers and those of the records it emitted.
func (t *Task) endOpen() {
	for i := range t.open {
		t.freeBufs = append(t.freeBufs, t.open[i].buf[:0])
	}
	clear(t.open)
	t.open = t.open[:0]
	clear(t.openIdx)
	for _, b := range t.usedBufs {
		t.freeBufs = append(t.freeBufs, b[:0])
	}
	clear(t.usedBufs)
	t.usedBufs = t.usedBufs[:0]
	t.txnChanged = false
}

// emitPerKey emits the entries of fx in the per-key layout.
func (t *Task) emitPerKey(req *schemas.Request, at int64, out *stage.Out) error {
	fx := &t.fx
	content := ""
	if fx.hasSum && t.SeenJSON {
		content = t.out.text(hex.AppendEncode(t.out.reserve(textRoom), fx.sum[:]))
	}
	for i := range fx.n {
		c := &fx.changes[i]
		c.val.flags |= flagPerKey
		key := c.key.appendKey(t.out.reserve(textRoom))
		var r *kgo.Record
		if t.SeenJSON {
			scope := t.out.text(key[len(key)-32:])
			t.draft.seen = c.entry(req, scope, content)
			var err error
			if r, err = t.out.recordKey(t.topics.Seen, key, &t.draft.seen, seenHeaders, at); err != nil {
				return err
			}
		} else {
			key = t.out.bytes(key) // claimed before the value is reserved after it
			c.entryV2(&t.draft.seenV2, fx)
			v := schemas.AppendSeenProto(t.out.reserve(valueRoom), &t.draft.seenV2)
			r = t.out.recordOf(t.topics.Seen, key, v, seenV2Headers, at)
		}
		r.Partition = t.partition
		out.Emit(r)
		t.setPending(c.key, pendingVal{val: c.val, strs: c.strs})
		// Queued now so it can expire within this transaction.
		t.pendQ.push(expiryItem{key: c.key, at: c.val.expiresAt})
	}
	return nil
}

// emitAccepted emits the accepted notification of req, with headers hs.
func (t *Task) emitAccepted(req *schemas.Request, at int64, hs []kgo.RecordHeader, out *stage.Out) error {
	occurrence := t.out.text(identity.AppendOccurrenceID(t.out.reserve(textRoom), req.NotificationID, at))
	t.draft.accepted = acceptedOf(req, at, occurrence)
	t.draft.accepted.Schema = t.RecordFormat.AcceptedSchema()
	key := schemas.AppendRecipientKey(t.out.reserve(textRoom), req.Tenant, req.Recipient)
	r, err := t.out.recordKey(t.topics.Accepted, key, &t.draft.accepted, hs, at)
	if err != nil {
		return err
	}
	out.Emit(r)
	return nil
}

// Tick implements stage.Task. The dedupe stage has no wall-clock timers:
// expiry runs on stream time inside Process, so decisions never depend on
// how records were batched.
//
// Tick ends the transaction's writes to herald.seen in the batched layout:
// the open bucket records are emitted, or, when the transaction changed
// the seen-set otherwise, the clock record with its final times.
func (t *Task) Tick(out *stage.Out) {
	if t.flushOpen(out) || !t.txnChanged {
		return
	}
	v := appendBatchTimes(t.out.reserve(textRoom), t.pendingStreamTime, t.pendingSweptTo)
	r := t.out.recordOf(t.topics.Seen, t.out.bytes(append(t.out.reserve(textRoom), clockKey...)), v, seenBatchHeaders, t.pendingStreamTime)
	r.Partition = t.partition
	out.Emit(r)
	t.txnChanged = false
}

// expire tombstones entries whose expiry the partition's stream time (the
// newest record time so far, this record's included) has passed by the
// policy's skew allowance.
//
// The sweep time never moves back (a restored one may be ahead of the
// stream time less the allowance, when the allowance grew). An entry of a
// per-key record is deleted with its key's tombstone, one in a bucket
// record without one; a bucket whose entries are all due is tombstoned.
func (t *Task) expire(out *stage.Out) {
	now := max(t.pendingStreamTime-t.policy.SkewAllowanceMs, t.pendingSweptTo)
	t.pendingSweptTo = now
	for {
		key, at, pos, ok := t.nextDue(now)
		if !ok {
			break
		}
		expires, flags, ok := t.expiryOf(key, pos)
		if !ok || expires != at {
			continue // replaced or already deleted: a newer item covers it
		}
		if flags&flagPerKey != 0 {
			t.tombstoneKey(key, out)
		} else {
			t.txnChanged = true
		}
		t.setPending(key, pendingVal{deleted: true})
	}
	for {
		b, ok := t.bk.due(now)
		if !ok {
			return
		}
		for seq := range b.n {
			r := t.out.newRecord()
			r.Topic, r.Key, r.Partition = t.topics.Seen, t.out.bytes(appendBucketKey(t.out.reserve(textRoom), b.end, seq)), t.partition
			out.Emit(r)
		}
		t.txnChanged = true
	}
}

// expiryOf returns the expiry of k's entry and whether it has one: the
// open transaction's change of k, else the committed entry at pos, which
// a committed queue's item named (it holds k: see nextDue). An open
// transaction's item always finds its key's change: it is queued with
// the change (emit) and dropped with it (Commit, Abort).
func (t *Task) expiryOf(k seenKey, pos uint32) (int64, uint8, bool) {
	if i, ok := t.pending[k]; ok {
		p := &t.changes[i]
		return p.val.expiresAt, p.val.flags, !p.deleted
	}
	v, _ := t.table(k.kind).entry(pos)
	return v.expiresAt, v.flags, true
}

// noPos is the position nextDue returns for an open transaction's item,
// which has none yet (positions stay below three quarters of 2^32: see
// seenTable).
const noPos = ^uint32(0)

// nextDue pops the earliest item due at now from the three queues (the
// committed entries', by kind, before the open transaction's at one
// time), and returns its key, its time and, for a committed item, the
// position of its key's entry (noPos for an open one). A committed item
// whose position holds no key is popped and skipped.
func (t *Task) nextDue(now int64) (key seenKey, at int64, pos uint32, ok bool) {
	for {
		kind := seenKind(0)
		for i := range t.queued {
			if t.queued[i].due(now) && (kind == 0 || t.queued[i].first().when() < t.queued[kind-1].first().when()) {
				kind = seenKind(i + 1)
			}
		}
		if kind == 0 || t.pendQ.due(now) && t.pendQ.first().at < t.queued[kind-1].first().when() {
			if !t.pendQ.due(now) {
				return key, 0, noPos, false
			}
			it := t.pendQ.pop()
			return it.key, it.at, noPos, true
		}
		it := t.queued[kind-1].pop()
		t.popped = append(t.popped, poppedItem{kind: kind, item: it})
		if id, live := t.table(kind).keyAt(it.pos); live {
			return seenKey{id: id, kind: kind}, it.when(), it.pos, true
		}
	}
}

// Commit implements stage.Task. Each changed key's last change is applied,
// in the order the keys were first changed, so positions, and the order of
// tombstones of one expiry, do not depend on map iteration.
func (t *Task) Commit() {
	for i := range t.changes {
		p := &t.changes[i]
		tb := t.table(p.key.kind)
		if p.deleted {
			tb.delete(&p.key.id)
			continue
		}
		pos := tb.set(&p.key.id, p.val, p.strs)
		t.queued[p.key.kind-1].push(newPosItem(p.val.expiresAt, pos))
	}
	t.dropPending()
	t.pendQ.reset()
	t.popped = t.popped[:0]
	t.streamTime = t.pendingStreamTime
	t.sweptTo = t.pendingSweptTo
	t.bk.commit()
	t.endOpen()
	t.decisions.Commit()
	t.out.release()
}

// Abort implements stage.Task.
func (t *Task) Abort() {
	t.dropPending()
	t.pendQ.reset()
	for _, p := range t.popped {
		t.queued[p.kind-1].push(p.item)
	}
	t.popped = t.popped[:0]
	t.pendingStreamTime = t.streamTime
	t.pendingSweptTo = t.sweptTo
	t.bk.abort()
	t.endOpen()
	t.decisions.Abort()
	t.out.release()
}
