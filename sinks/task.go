package sinks

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

// task is one input partition's state: the committed entries, and what the
// current transaction changes.
type task struct {
	rt *runtime
	p  int32

	// Committed state: final entries (the sent-set) keep only their
	// outcome and expiry; open ones (pending, parked) their whole entry.
	final map[string]finalEntry
	open  map[string]*schemas.SinkEntry

	// staged are this transaction's changes (applied on Commit).
	staged map[string]*schemas.SinkEntry
	// calls are the intents this transaction writes; toCall the committed
	// intents waiting for the provider (taken by runtime.afterCommit).
	calls, toCall []call
	// results wait to be written; emitted of them are in the current
	// transaction. interrupted are restored intents without a result,
	// resolved the same way.
	results          []done
	emitted          int
	interrupted      []*schemas.SinkEntry
	interruptEmitted int
	// restored is set once the restored intents were collected.
	restored bool
	// pruned is when the sent-set was last pruned.
	pruned time.Time
	// outcomes and duplicates this transaction writes, counted in the
	// metrics once it commits.
	outcomes, duplicates int64
	// devicesSynced is set once this transaction synced the devices table.
	devicesSynced bool
}

// finalEntry is one delivery of the sent-set.
type finalEntry struct {
	outcome   string
	expiresAt int64
	// attempt is the number of the delivery's last attempt: a redrive
	// names the attempt its dead letter failed at (redrivable).
	attempt int
}

func newTask(rt *runtime, p int32) *task {
	return &task{rt: rt, p: p, final: map[string]finalEntry{}, open: map[string]*schemas.SinkEntry{}, staged: map[string]*schemas.SinkEntry{}}
}

// Restore implements stage.Task.
func (t *task) Restore(r *kgo.Record) error {
	id := string(r.Key)
	if r.Value == nil {
		delete(t.final, id)
		delete(t.open, id)
		return nil
	}
	var e schemas.SinkEntry
	if err := schemas.Decode(r.Value, &e); err != nil {
		return fmt.Errorf("sinks: restore %s: %w", id, err)
	}
	t.apply(id, &e)
	return nil
}

func (t *task) apply(id string, e *schemas.SinkEntry) {
	if e == nil { // pruned
		delete(t.final, id)
		delete(t.open, id)
		return
	}
	if e.Status == schemas.SinkFinal {
		delete(t.open, id)
		t.final[id] = finalEntry{outcome: e.Outcome, expiresAt: e.ExpiresAt, attempt: e.Attempt}
		return
	}
	delete(t.final, id)
	t.open[id] = e
}

// lookup returns the delivery's current status ("" if unknown).
func (t *task) lookup(id string) string {
	if e, ok := t.staged[id]; ok {
		if e == nil {
			return "" // pruned in this transaction
		}
		return e.Status
	}
	if _, ok := t.final[id]; ok {
		return schemas.SinkFinal
	}
	if e, ok := t.open[id]; ok {
		return e.Status
	}
	return ""
}

// Process implements stage.Task: a new delivery becomes an intent (or is
// parked, or expires); a known one is not sent again.
func (t *task) Process(r *kgo.Record, out *stage.Out) error {
	var cmd schemas.DeliveryCommand
	if err := schemas.Decode(r.Value, &cmd); err != nil || cmd.DeliveryID == "" {
		t.rt.log.Warn("unreadable delivery command dead-lettered", "partition", r.Partition, "offset", r.Offset, "err", err)
		out.Emit(&kgo.Record{Topic: t.rt.topics.DeadLetters, Key: r.Key, Value: r.Value, Headers: []kgo.RecordHeader{
			{Key: "herald-reason", Value: []byte(fmt.Sprintf("unreadable delivery command: %v", err))},
			{Key: "herald-source", Value: []byte(fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset))},
		}})
		return nil
	}
	now := t.rt.now()
	failedAt, redrive := RedriveOf(r)
	if st := t.lookup(cmd.DeliveryID); st != "" && !(redrive && t.redrivable(cmd.DeliveryID, failedAt)) {
		// Audited as a duplicate decision of the sink, not as an attempt:
		// nothing was sent.
		detail := "delivery " + cmd.DeliveryID + " is already " + st + ": not sent again"
		if redrive {
			detail = "redrive of the dead letter of delivery " + cmd.DeliveryID + " (failed at attempt " + strconv.Itoa(failedAt) +
				"): it was redriven already, so it is " + st + ": not sent again"
		}
		t.duplicates++
		out.Emit(t.record(t.rt.topics.Decisions, cmd.NotificationID, &schemas.Decision{
			Schema:     t.rt.format.DecisionSchema(),
			DecisionID: fmt.Sprintf("sink/%s/%s/%d/%d", t.rt.channel, r.Topic, r.Partition, r.Offset), Stage: "sink",
			Outcome: schemas.DecisionDuplicate, Detail: detail,
			Tenant: cmd.Tenant, Type: cmd.Type, Recipient: cmd.Recipient, NotificationID: cmd.NotificationID, Channel: t.rt.channel,
			At: now.UnixMilli(), SourceTopic: r.Topic, SourcePartition: r.Partition, SourceOffset: r.Offset,
		}))
		return nil
	}
	e := &schemas.SinkEntry{DeliveryID: cmd.DeliveryID, ExpiresAt: t.expiresAt(&cmd), Command: &cmd}
	if redrive {
		// Attempts go on numbering after the failed one (attempt ids stay
		// unique); the retry budget starts afresh.
		e.Attempt, e.AttemptBase = failedAt, failedAt
	}
	if now.UnixMilli() >= e.ExpiresAt {
		why := "expired before the first attempt"
		if redrive {
			why = "redriven after its expiry: not sent"
		}
		t.finish(out, e, schemas.OutcomeExpired, why, now)
	} else if cmd.NotBefore > now.UnixMilli() {
		e.Status, e.NotBefore = schemas.SinkParked, cmd.NotBefore
		t.put(out, e, now)
	} else {
		t.start(out, e, e.Attempt+1, now)
	}
	return nil
}

// HeaderRedrive marks a delivery command redriven from a dead letter
// (herald deadletters redrive): its value is the number of the attempt the
// delivery failed at, in decimal (the dead letter's herald-attempts).
const HeaderRedrive = "herald-redrive"

// RedriveOf returns the attempt a redriven command's dead letter failed at,
// and whether r is a redrive at all (a HeaderRedrive with a positive
// number).
func RedriveOf(r *kgo.Record) (int, bool) {
	for _, h := range r.Headers {
		if h.Key != HeaderRedrive {
			continue
		}
		n, err := strconv.Atoi(string(h.Value))
		if err != nil || n <= 0 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// redrivable reports whether a redrive of the dead letter of delivery id,
// which failed at attempt failedAt, may start a new attempt: only if the
// delivery is still final as that failure left it (outcome failed, last
// attempt failedAt). Once one redrive has started attempt failedAt+1 every
// later copy of it (a redrive run twice, or re-run after a crash) finds
// the delivery pending, parked or final at a later attempt, and is not
// sent. A delivery the sent-set no longer holds (pruned Policy.KeepFinal
// after its expiry) is not looked up here: its command is expired, so it
// ends expired, unsent (a command with neither ExpiresAt nor CreatedAt
// would get a fresh expiry; the route stage always sets CreatedAt).
func (t *task) redrivable(id string, failedAt int) bool {
	if e, ok := t.staged[id]; ok {
		return e != nil && e.Status == schemas.SinkFinal && e.Outcome == schemas.OutcomeFailed && e.Attempt == failedAt
	}
	if f, ok := t.final[id]; ok {
		return f.outcome == schemas.OutcomeFailed && f.attempt == failedAt
	}
	return false
}

// start begins attempt n: an intent and a call after the commit, or, for
// a Writer, the write itself in this transaction.
func (t *task) start(out *stage.Out, e *schemas.SinkEntry, n int, now time.Time) {
	w, ok := t.rt.provider.(Writer)
	if !ok {
		t.intend(out, e, n, now)
		return
	}
	d := done{call: call{cmd: e.Command, attempt: n, base: e.AttemptBase}, at: now, res: Result{Class: Success, Rule: "written"}}
	recs, err := w.Records(e.Command, now)
	if err != nil {
		d.res = Result{Class: Permanent, Rule: "unwritable", Reason: err.Error(), Err: err}
	}
	for _, r := range recs {
		out.Emit(r)
	}
	t.rt.calls.Inc()
	t.rt.byClass[d.res.Class].Inc()
	t.resolve(out, d)
}

func (t *task) expiresAt(cmd *schemas.DeliveryCommand) int64 {
	if cmd.ExpiresAt > 0 {
		return cmd.ExpiresAt
	}
	created := cmd.CreatedAt
	if created <= 0 {
		created = t.rt.now().UnixMilli()
	}
	return created + t.rt.policy.MaxAge.Milliseconds()
}

// intend writes the intent of attempt n and schedules the call for after
// the commit.
func (t *task) intend(out *stage.Out, e *schemas.SinkEntry, n int, now time.Time) {
	e.Status, e.Attempt, e.NotBefore = schemas.SinkPending, n, 0
	t.put(out, e, now)
	t.calls = append(t.calls, call{cmd: e.Command, attempt: n, base: e.AttemptBase})
}

// put stages e and emits it to the state topic.
func (t *task) put(out *stage.Out, e *schemas.SinkEntry, now time.Time) {
	e.UpdatedAt = now.UnixMilli()
	t.staged[e.DeliveryID] = e
	out.Emit(t.record(t.rt.topics.State, e.DeliveryID, e))
}

func (t *task) record(topic, key string, v schemas.Record) *kgo.Record {
	b, err := schemas.Encode(v)
	if err != nil { // only herald's own types with valid fields: cannot fail
		panic(err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: b, Partition: t.p,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.NameOf(v))}}}
}

// finish makes e final with an outcome.
func (t *task) finish(out *stage.Out, e *schemas.SinkEntry, status, reason string, now time.Time) {
	cmd := e.Command
	out.Emit(t.record(t.rt.topics.Outcomes, cmd.DeliveryID, &schemas.Outcome{
		DeliveryID: cmd.DeliveryID, NotificationID: cmd.NotificationID, OccurrenceID: cmd.OccurrenceID, Tenant: cmd.Tenant, Type: cmd.Type,
		Recipient: cmd.Recipient, DeviceID: cmd.DeviceID, Channel: t.rt.channel, Status: status, Reason: reason,
		Attempts: e.Attempt, At: now.UnixMilli(),
	}))
	t.put(out, &schemas.SinkEntry{DeliveryID: e.DeliveryID, Status: schemas.SinkFinal, Attempt: e.Attempt, AttemptBase: e.AttemptBase, ExpiresAt: e.ExpiresAt, Outcome: status}, now)
	t.outcomes++
}

// Tick implements stage.Task: it writes the results of the calls made
// after the last commit and of interrupted intents, and, outside the
// runtime's results round, promotes parked deliveries that are due.
func (t *task) Tick(out *stage.Out) {
	now := t.rt.now()
	if !t.restored {
		// The first Tick after assignment: every pending entry is an
		// intent a previous owner committed and never resolved.
		t.restored = true
		for _, e := range t.open {
			if e.Status == schemas.SinkPending {
				t.interrupted = append(t.interrupted, e)
			}
		}
	}
	for _, e := range t.interrupted[t.interruptEmitted:] {
		if t.lookup(e.DeliveryID) != schemas.SinkPending {
			continue // superseded
		}
		t.resolve(out, done{call: call{cmd: e.Command, attempt: e.Attempt, base: e.AttemptBase}, at: now,
			res: Result{Class: Ambiguous, Rule: "interrupted", Reason: "intent without a result: the sink stopped during the call or before committing its result"}})
	}
	t.interruptEmitted = len(t.interrupted)
	for _, d := range t.results[t.emitted:] {
		t.resolve(out, d)
	}
	t.emitted = len(t.results)
	if t.rt.inResultsRound() {
		return
	}
	t.prune(out, now)
	parked, oldest := 0, now.UnixMilli()
	for id, e := range t.open {
		if e.Status == schemas.SinkParked {
			parked++
			if e.Command != nil && e.Command.CreatedAt > 0 {
				oldest = min(oldest, e.Command.CreatedAt)
			}
		}
		if e.Status != schemas.SinkParked || e.NotBefore > now.UnixMilli() {
			continue
		}
		if _, changed := t.staged[id]; changed {
			continue
		}
		next := *e
		if now.UnixMilli() >= e.ExpiresAt {
			t.finish(out, &next, schemas.OutcomeExpired, "expired while waiting to be retried", now)
			continue
		}
		t.start(out, &next, e.Attempt+1, now)
	}
	t.rt.parked(t.p, parked, now.UnixMilli()-oldest)
}

// prune deletes (tombstones) the sent-set entries whose delivery expired
// more than Policy.KeepFinal ago, at most once per minute: a repeat of such a
// command can no longer be sent (it is expired), so its entry is not needed
// to stop a second send; the repeat gets an expired outcome instead.
func (t *task) prune(out *stage.Out, now time.Time) {
	if now.Sub(t.pruned) < time.Minute {
		return
	}
	t.pruned = now
	cut := now.Add(-t.rt.policy.KeepFinal).UnixMilli()
	for id, f := range t.final {
		if f.expiresAt <= 0 || f.expiresAt >= cut {
			continue
		}
		if _, changed := t.staged[id]; changed {
			continue
		}
		t.staged[id] = nil
		out.Emit(&kgo.Record{Topic: t.rt.topics.State, Key: []byte(id), Partition: t.p})
	}
}

// resolve writes one call's Attempt and the delivery's next state.
func (t *task) resolve(out *stage.Out, d done) {
	cmd, res, now := d.cmd, d.res, d.at
	a := &schemas.Attempt{
		AttemptID: cmd.DeliveryID + "." + strconv.Itoa(d.attempt), DeliveryID: cmd.DeliveryID, NotificationID: cmd.NotificationID,
		Tenant: cmd.Tenant, Type: cmd.Type, Recipient: cmd.Recipient, DeviceID: cmd.DeviceID, Channel: t.rt.channel,
		Attempt: d.attempt, Result: res.Class.String(), Classification: res.Rule, ProviderStatus: res.Status,
		ProviderReason: res.Reason, ProviderMessageID: res.MessageID, CollapseID: cmd.CollapseID, APNsID: cmd.APNsID,
		Locale: cmd.Locale, LatencyMs: d.latency.Milliseconds(), RetryAfterMs: res.RetryAfter.Milliseconds(), At: now.UnixMilli(),
	}
	out.Emit(t.record(t.rt.topics.Attempts, cmd.DeliveryID, a))

	e := &schemas.SinkEntry{DeliveryID: cmd.DeliveryID, Attempt: d.attempt, AttemptBase: d.base, ExpiresAt: t.expiresAt(cmd), Command: cmd}
	v := decide(t.rt.policy, res, d.attempt-d.base, e.ExpiresAt, now)
	var retire *schemas.Device
	if _, retirer := t.rt.provider.(Retirer); v.status == schemas.OutcomeDeviceRetired && !retirer {
		dev, why := t.retirable(cmd)
		if why != "" {
			v = verdict{status: schemas.OutcomeFailed, reason: "permanent: " + v.reason + "; device not retired: " + why}
		} else if dev.Enabled {
			retire = &dev
		}
	}
	switch v.status {
	case "":
		e.Status, e.NotBefore = schemas.SinkParked, v.notBefore
		t.put(out, e, now)
		return
	case schemas.OutcomeDeviceRetired:
		if r, ok := t.rt.provider.(Retirer); ok {
			for _, rec := range r.Retire(cmd, v.reason, now) {
				out.Emit(rec)
			}
			break
		}
		if retire != nil { // nil: already retired
			retire.Enabled, retire.RetiredReason, retire.UpdatedAt = false, v.reason, now.UnixMilli()
			out.Emit(t.record(t.rt.topics.Devices, schemas.DeviceKey(cmd.Tenant, cmd.Recipient, cmd.DeviceID), retire))
		}
	case schemas.OutcomeFailed:
		rec := t.record(t.rt.topics.DeadLetters, cmd.DeliveryID, cmd)
		rec.Headers = append(rec.Headers,
			kgo.RecordHeader{Key: "herald-reason", Value: []byte(v.reason)},
			kgo.RecordHeader{Key: "herald-attempts", Value: []byte(strconv.Itoa(d.attempt))},
			kgo.RecordHeader{Key: "herald-source", Value: []byte("sink." + t.rt.channel)})
		out.Emit(rec)
	}
	t.finish(out, e, v.status, v.reason, now)
}

// retirable returns the device a token error about cmd retires, as
// herald.devices has it now (every field kept), or why none is: the device
// was removed, or it was registered again with another token (or
// subscription) since the command was fanned out, so the error is about a
// token it no longer has. The table is synced once per transaction (read
// your writes: every device change acknowledged before then is seen).
func (t *task) retirable(cmd *schemas.DeliveryCommand) (schemas.Device, string) {
	if t.rt.devices == nil {
		return schemas.Device{}, "no devices table"
	}
	if !t.devicesSynced {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := t.rt.devices.SyncAll(ctx)
		cancel()
		if err != nil {
			t.rt.log.Warn("devices table unavailable: a token error retires no device", "err", err)
			return schemas.Device{}, fmt.Sprintf("devices unavailable: %v", err)
		}
		t.devicesSynced = true
	}
	for _, d := range t.rt.devices.Recipient(cmd.Tenant, cmd.Recipient).Devices {
		if d.DeviceID != cmd.DeviceID {
			continue
		}
		if !sameToken(&d, cmd) {
			return schemas.Device{}, "it was registered again with another token since"
		}
		return d, ""
	}
	return schemas.Device{}, "it was removed"
}

// sameToken reports whether d still has the token (or Web Push
// subscription) cmd was sent to.
func sameToken(d *schemas.Device, cmd *schemas.DeliveryCommand) bool {
	if cmd.WebPush != nil || d.WebPush != nil {
		return cmd.WebPush != nil && d.WebPush != nil && cmd.WebPush.Endpoint == d.WebPush.Endpoint
	}
	return d.Token == cmd.Token
}

// Commit implements stage.Task.
func (t *task) Commit() {
	for id, e := range t.staged {
		t.apply(id, e)
	}
	clear(t.staged)
	t.toCall = append(t.toCall, t.calls...)
	t.calls = nil
	t.results = t.results[t.emitted:]
	t.emitted = 0
	t.interrupted = t.interrupted[t.interruptEmitted:]
	t.interruptEmitted = 0
	t.devicesSynced = false
	t.rt.outcomes.Add(t.outcomes)
	t.rt.duplicates.Add(t.duplicates)
	t.outcomes, t.duplicates = 0, 0
}

// Abort implements stage.Task: staged changes and intents are dropped (the
// input is processed again); results stay, to be written next time.
func (t *task) Abort() {
	clear(t.staged)
	t.calls = nil
	t.emitted = 0
	t.interruptEmitted = 0
	t.outcomes, t.duplicates = 0, 0
	t.devicesSynced = false
}

// Revoked implements stage.Revoker: the partition is no longer this
// instance's, so the runtime forgets its task (state, intents and results:
// none are left, the step that made them ended before the revoke) and its
// gauges; if the partition comes back, stage restores a new task.
func (t *task) Revoked() {
	t.rt.mu.Lock()
	if t.rt.tasks[t.p] == t {
		delete(t.rt.tasks, t.p)
	}
	t.rt.mu.Unlock()
	t.rt.forgetParked(t.p)
}
