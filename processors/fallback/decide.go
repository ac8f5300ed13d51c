// Package fallback owns the fallback stage: per notification of a type
// with a fallback chain (route.Chain, e.g. "push > email after 15m unless
// displayed|opened > feed" or "push > email if failed"), the steps after
// the first, each fired at most once, when its condition holds, and never
// after what cancels it was recorded.
//
// Topology. The route stage fans out the first step and writes the plan
// (schemas.Fallback: every step, with the later steps' delivery commands
// resolved when it decided) to herald.fallback, keyed by notification id,
// in the transaction of its decision. Two forwarders re-key onto the same
// topic what herald records about the notification's deliveries: outcomes
// (herald.outcomes, keyed by delivery id) and the web client's receipts
// (herald.receipts, keyed by delivery id), of the types with a chain; and
// each writes its watermarks there (below). The fallback stage
// (herald.fallback in) keeps each notification's entry, and the
// watermarks, in the compacted changelog herald.fallbackstate
// (co-partitioned), and the transaction that fires a step writes its
// delivery commands (to herald.deliveries.<channel>, as the route stage
// does: the sinks deliver them with their usual identity), its decision
// and the entry with the step marked fired, with its input offsets. A
// crash before the commit fires it again from the restored entry; after
// it never: each step fires at most once per notification (and
// recipient: a notification has one).
//
// Semantics (Decide), for each step after the first, once the step before
// it fired at time P (the first step fired at the route decision, or at
// the end of quiet hours when its pushes waited for it):
//   - The step is ready at T = P + after (its delay; 0 without one). A step
//     with "if failed" is ready only once every delivery of the step before
//     has an outcome and none is delivered (device_retired, failed,
//     dead_lettered, expired: nothing reached the device), at the latest of
//     T and those outcomes' times; one delivered outcome cancels it.
//   - When the step before made no delivery at all (no device on its
//     channels), there is nothing to wait for: the step is ready at P,
//     whatever its delay or "if failed".
//   - A receipt of a kind the step names after "unless" (displayed,
//     opened), for any delivery of the notification, recorded before T
//     (its At, the API's clock when it wrote it), cancels it. A receipt
//     recorded at or after T does not: the step was due first. While an
//     "if failed" step waits for outcomes, any such receipt cancels it.
//   - A step fires once the stage's clock (now, below) reaches T: its
//     decision and commands are stamped T, whenever the stage gets there.
//   - A cancelled step cancels every step after it: the chain stops.
//
// The clock: watermarks. The stage's clock on a partition of
// herald.fallback is the earliest of the forwarders' watermarks: never
// the wall clock, never a record's time. A forwarder (one task per
// partition of herald.outcomes or herald.receipts) writes a mark (kind,
// source partition, its partition count, time W) to every partition of
// herald.fallback (schemas.FallbackWatermark), meaning: every record
// committed to that source partition before W precedes this mark on
// every partition of herald.fallback. The rule that makes W safe
// (Markable): every MarkInterval (1 s) the forwarder reads its clock W,
// then asks each partition's leader for its last stable offset End (a
// read_committed ListOffsets: every record committed before the request
// lies below it), then the log start offset and the group's committed
// offset; a task writes the mark W, in a transaction, once it has
// forwarded every record below End in that transaction or a committed one
// (its position, counted with control records, which the forwarders
// read; or the group's committed offset, which an idle partition reaches
// once its last transaction's commit marker is read). A forwarded record
// is appended to herald.fallback before the transaction that forwards it
// commits, so before any later mark: a read_committed reader meets it
// first. The mark keeps coming while the partition is idle, so idle
// partitions advance. The stage keeps per partition the latest mark of
// every (kind, source partition) (Watermarks, in herald.fallbackstate
// under the key "watermarks", so a restore keeps them) and its clock is
// the minimum over both kinds and every source partition, the count taken
// from the marks themselves (the largest one named); a source partition
// never heard of holds it at 0. When a mark moves the clock, the steps
// due fire in its Process, the mark their source in the audit, and once
// a minute of that clock old entries expire: the replay, reading the same
// records in the same order, decides the same steps at the same place.
//
// What the clock guarantees, and assumes:
//   - A receipt committed to herald.receipts before a receipts forwarder's
//     clock read T, and recorded before T (its At < T), is read by the
//     stage before its clock reaches T, whatever the forwarders' lag: it
//     cancels the step. No grace period is involved.
//   - Assumed: the clock of the API instance that records a receipt is
//     not ahead of the receipts forwarders' clocks (At is read before the
//     receipt is written, so then At < T for every receipt committed
//     before T). An API clock ahead by d makes a receipt committed in the
//     last d before T count as recorded after T: it does not cancel. An
//     API clock behind makes more receipts count as recorded before T;
//     those committed after the forwarders' clock read T may come too late
//     (the step has fired). The route stage's and the sinks' clocks only
//     set T and the outcomes' times: they move when a step fires, not what
//     cancels it.
//   - Assumed: a partition leader's last stable offset never goes back (a
//     new leader answers ListOffsets with OFFSET_NOT_AVAILABLE until its
//     high watermark has caught up, KIP-207; the probe then keeps its
//     previous reading), and the forwarders' groups are not reset past
//     records they never forwarded (--reset-offsets latest skips them, and
//     the marks count them as read; so do records the topic's retention
//     deleted before a forwarder read them).
//   - A stalled forwarder (down, rebalancing, behind, its probe failing)
//     holds the clock: it delays every step of the stage by as long, and
//     fires none early. herald_fallback_watermark_lag_seconds{partition}
//     (wall clock minus the clock) shows it; with the forwarders keeping
//     up it stays within about MarkInterval plus a transaction.
//   - Every step waits for the clock, also one with no delay and no
//     condition: it fires about MarkInterval after its time at the least.
//   - A mark is written per forwarder task, MarkInterval, and partition of
//     herald.fallback: P × 2 × P records a MarkInterval for P partitions
//     everywhere (288 a second for 12), and the stage writes its
//     watermarks to its changelog once per transaction that read one.
//   - An earlier fallback stage skips the marks (a record of another
//     schema, with a warning each) and cannot restore a changelog that
//     holds the "watermarks" record: do not run it against one.
//
// Every step is a decision on herald.decisions (stage fallback): outcome
// fallback when it fires, with its deliveries, fallback_cancelled when it
// never will, the step and the reason in Detail; its id is
// "fallback/<occurrence>/<step>", one per step.
//
// Identity. A step's commands are the route stage's (route.command): the
// delivery id is identity.DeliveryID(occurrence, device), and a chain
// names each channel in one step only, so every step's delivery ids are
// its own, and the same on every retry of the sink (an email's Message-ID
// derives from it).
//
// Hazards and their bounds:
//   - Devices and preferences are the route stage's when it decided: an
//     address registered after that is not in the plan (as deferred
//     pushes are resolved when deferred).
//   - Receipts name their delivery, not the occurrence: the stage keeps one
//     entry per notification id. A plan of a newer occurrence cancels the
//     older one's pending steps (superseded) and takes its place; outcomes
//     and receipts count only for deliveries the plan lists.
//   - Records read before the plan (two forwarders and the route stage
//     write the topic independently) are kept in the entry until it comes.
//     An entry is dropped MaxOpen after its first record (7 days by
//     default, on the stage's clock); its pending steps are cancelled then
//     (expired), and one never planned is dropped without a decision. A
//     done entry stays until then, so a late outcome or receipt changes
//     nothing.
//   - The webhook completion stage's send.completed does not wait for
//     fallback deliveries: it lists them if their outcomes come first.
package fallback

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/schemas"
)

// Change is what Decide did to one step.
type Change struct {
	// Step is the step's index in the chain (the first step is 0).
	Step  int
	State string // schemas.FallbackFired or FallbackCancelled
	At    int64
	// Reason, in words.
	Reason string
	// Commands are what a fired step sends, stamped At.
	Commands []schemas.DeliveryCommand
}

// never is the time of a step that is not ready.
const never = int64(1<<63 - 1)

// Decide judges the pending steps of e at clock now. It returns the entry
// with their new states, the changes in step order, and when to decide
// again (the earliest time a pending step becomes ready on the clock
// alone; 0: only a new record can change anything). It changes nothing
// of an entry whose plan has not been read, or that is done.
func Decide(e schemas.Fallback, now int64) (schemas.Fallback, []Change, int64) {
	if e.PlannedAt == 0 || e.Done {
		return e, nil, 0
	}
	e.Steps = slices.Clone(e.Steps)
	var changes []Change
	var wake int64
	for i := 1; i < len(e.Steps); i++ {
		st := &e.Steps[i]
		if st.State != schemas.FallbackPending {
			continue
		}
		prev := e.Steps[i-1]
		if prev.State == schemas.FallbackCancelled {
			changes = append(changes, settle(st, i, schemas.FallbackCancelled, prev.At, "step "+strconv.Itoa(i)+" was cancelled"))
			continue
		}
		if prev.State != schemas.FallbackFired {
			break // waits for the step before
		}
		ready, because, cancel := readyAt(e, prev, *st)
		if cancel != "" {
			changes = append(changes, settle(st, i, schemas.FallbackCancelled, max(prev.At, because), cancel))
			continue
		}
		if r, ok := cancelling(e, *st, ready); ok {
			changes = append(changes, settle(st, i, schemas.FallbackCancelled, max(prev.At, r.At),
				fmt.Sprintf("%s receipt of delivery %s at %s", r.Kind, r.DeliveryID, fmtTime(r.At))))
			continue
		}
		if ready == never {
			break // waits for outcomes
		}
		if now < ready {
			wake = ready
			break
		}
		cmds := slices.Clone(st.Commands)
		c := settle(st, i, schemas.FallbackFired, ready, firedReason(e, prev, *st, i, ready))
		c.Commands = cmds
		for j := range c.Commands {
			c.Commands[j].CreatedAt = ready
		}
		changes = append(changes, c)
	}
	e.Done = true
	for _, st := range e.Steps {
		if st.State == schemas.FallbackPending {
			e.Done = false
		}
	}
	return e, changes, wake
}

// Cancel cancels every pending step of e at time at, for reason (an
// expired entry, a superseded occurrence).
func Cancel(e schemas.Fallback, at int64, reason string) (schemas.Fallback, []Change) {
	if e.PlannedAt == 0 || e.Done {
		return e, nil
	}
	e.Steps = slices.Clone(e.Steps)
	var changes []Change
	for i := 1; i < len(e.Steps); i++ {
		if st := &e.Steps[i]; st.State == schemas.FallbackPending {
			changes = append(changes, settle(st, i, schemas.FallbackCancelled, at, reason))
		}
	}
	e.Done = true
	return e, changes
}

// settle ends a step: its commands are no longer kept (the change of a
// fired step carries them), so a settled entry stays small.
func settle(st *schemas.FallbackStep, i int, state string, at int64, reason string) Change {
	st.State, st.At, st.Reason, st.Commands = state, at, reason, nil
	return Change{Step: i, State: state, At: at, Reason: reason}
}

// readyAt is when st becomes ready after prev fired (never: it waits for
// outcomes), or why it never will (cancel, at time because).
func readyAt(e schemas.Fallback, prev, st schemas.FallbackStep) (ready, because int64, cancel string) {
	if len(prev.Deliveries) == 0 {
		return prev.At, 0, ""
	}
	ready = prev.At + st.AfterMs
	if !st.IfFailed {
		return ready, 0, ""
	}
	for _, id := range prev.Deliveries {
		o, ok := outcomeOf(e, id)
		if !ok {
			ready = never
			continue
		}
		if o.Status == schemas.OutcomeDelivered {
			return 0, o.At, "delivery " + id + " was delivered at " + fmtTime(o.At)
		}
		if ready != never {
			ready = max(ready, o.At)
		}
	}
	return ready, 0, ""
}

// cancelling is the first receipt that cancels st, ready at ready: of a
// kind it names, for a delivery of the plan, recorded before ready.
func cancelling(e schemas.Fallback, st schemas.FallbackStep, ready int64) (schemas.FallbackReceipt, bool) {
	for _, r := range e.Receipts {
		if slices.Contains(st.Unless, r.Kind) && r.At < ready && planned(e, r.DeliveryID) {
			return r, true
		}
	}
	return schemas.FallbackReceipt{}, false
}

func firedReason(e schemas.Fallback, prev, st schemas.FallbackStep, i int, at int64) string {
	var why string
	if len(prev.Deliveries) == 0 {
		why = "step " + strconv.Itoa(i) + " made no delivery"
	} else if st.IfFailed {
		var statuses []string
		for _, id := range prev.Deliveries {
			o, _ := outcomeOf(e, id)
			if !slices.Contains(statuses, o.Status) {
				statuses = append(statuses, o.Status)
			}
		}
		why = "every delivery of step " + strconv.Itoa(i) + " ended undelivered (" + strings.Join(statuses, ", ") + ")"
	} else if st.AfterMs > 0 {
		why = (time.Duration(st.AfterMs) * time.Millisecond).String() + " passed since step " + strconv.Itoa(i)
	} else {
		why = "fires with step " + strconv.Itoa(i)
	}
	if st.AfterMs > 0 && st.IfFailed && len(prev.Deliveries) > 0 {
		why += " and " + (time.Duration(st.AfterMs) * time.Millisecond).String() + " passed"
	}
	if len(st.Unless) > 0 && len(prev.Deliveries) > 0 {
		why += ", no " + strings.Join(st.Unless, " or ") + " receipt before " + fmtTime(at)
	}
	return why
}

func outcomeOf(e schemas.Fallback, id string) (schemas.FallbackOutcome, bool) {
	for _, o := range e.Outcomes {
		if o.DeliveryID == id {
			return o, true
		}
	}
	return schemas.FallbackOutcome{}, false
}

// planned reports whether the plan lists the delivery, in any step.
func planned(e schemas.Fallback, id string) bool {
	for _, st := range e.Steps {
		if slices.Contains(st.Deliveries, id) {
			return true
		}
	}
	return false
}

// ApplyPlan adds the route stage's plan to e (nil: a new entry), reporting
// the steps it cancels: the pending steps of an older occurrence's plan,
// which it supersedes. A repeat of the plan changes nothing. Outcomes and
// receipts read so far are kept if the plan lists their delivery.
func ApplyPlan(e *schemas.Fallback, plan schemas.Fallback, at int64) (schemas.Fallback, []Change) {
	if e == nil {
		plan.Outcomes, plan.Receipts, plan.Done, plan.FirstAt = nil, nil, false, at
		return plan, nil
	}
	if e.PlannedAt != 0 && e.OccurrenceID == plan.OccurrenceID {
		return *e, nil
	}
	var changes []Change
	if e.PlannedAt != 0 {
		_, changes = Cancel(*e, at, "superseded by occurrence "+schemas.Occurrence(plan.NotificationID, plan.OccurrenceID))
	}
	n := plan
	n.Done, n.FirstAt, n.Outcomes, n.Receipts = false, e.FirstAt, nil, nil
	if e.PlannedAt != 0 {
		n.FirstAt = at
	}
	for _, o := range e.Outcomes {
		if planned(n, o.DeliveryID) {
			n.Outcomes = append(n.Outcomes, o)
		}
	}
	for _, r := range e.Receipts {
		if planned(n, r.DeliveryID) {
			n.Receipts = append(n.Receipts, r)
		}
	}
	return n, changes
}

// ApplyOutcome adds a delivery's final state to e (nil: a new entry); a
// second outcome of one delivery changes nothing, nor does one of a
// delivery another occurrence's plan lists.
func ApplyOutcome(e *schemas.Fallback, o schemas.Outcome, at int64) schemas.Fallback {
	n := entryFor(e, o.NotificationID, o.Tenant, o.Type, o.Recipient, at)
	if _, ok := outcomeOf(n, o.DeliveryID); ok || n.Done || (n.PlannedAt != 0 && !planned(n, o.DeliveryID)) {
		return n
	}
	n.Outcomes = append(slices.Clip(n.Outcomes), schemas.FallbackOutcome{DeliveryID: o.DeliveryID, Status: o.Status, Reason: o.Reason, At: o.At})
	return n
}

// ApplyReceipt adds a receipt to e (nil: a new entry); a second receipt of
// one kind for one delivery changes nothing.
func ApplyReceipt(e *schemas.Fallback, r schemas.Receipt, at int64) schemas.Fallback {
	n := entryFor(e, r.NotificationID, r.Tenant, r.Type, r.Recipient, at)
	if n.Done || (n.PlannedAt != 0 && !planned(n, r.DeliveryID)) {
		return n
	}
	for _, x := range n.Receipts {
		if x.DeliveryID == r.DeliveryID && x.Kind == r.Kind {
			return n
		}
	}
	n.Receipts = append(slices.Clip(n.Receipts), schemas.FallbackReceipt{DeliveryID: r.DeliveryID, Kind: r.Kind, At: r.At})
	return n
}

func entryFor(e *schemas.Fallback, nid, tenant, typ, recipient string, at int64) schemas.Fallback {
	if e != nil {
		return *e
	}
	return schemas.Fallback{NotificationID: nid, Tenant: tenant, Type: typ, Recipient: recipient, FirstAt: at}
}

// Decision is the audit record of one step's change. Its id is one per
// step of the occurrence; src is the record that caused it (empty for a
// timer).
func Decision(e schemas.Fallback, c Change, srcTopic string, srcPartition int32, srcOffset int64) schemas.Decision {
	occurrence := schemas.Occurrence(e.NotificationID, e.OccurrenceID)
	st := e.Steps[c.Step]
	d := schemas.Decision{
		DecisionID: "fallback/" + occurrence + "/" + strconv.Itoa(c.Step+1), Stage: "fallback", Outcome: schemas.DecisionFallback,
		Detail:    "step " + strconv.Itoa(c.Step+1) + " (" + stepText(st) + ") fired: " + c.Reason,
		RequestID: e.RequestID, Tenant: e.Tenant, Type: e.Type, Recipient: e.Recipient, NotificationID: e.NotificationID,
		OccurrenceID: e.OccurrenceID, At: c.At, SourceTopic: srcTopic, SourcePartition: srcPartition, SourceOffset: srcOffset,
	}
	if c.State == schemas.FallbackCancelled {
		d.Outcome = schemas.DecisionFallbackCancelled
		d.Detail = "step " + strconv.Itoa(c.Step+1) + " (" + stepText(st) + ") cancelled: " + c.Reason
	}
	for _, cmd := range c.Commands {
		d.Deliveries = append(d.Deliveries, schemas.DecisionDelivery{DeliveryID: cmd.DeliveryID, Channel: cmd.Channel, DeviceID: cmd.DeviceID,
			State: schemas.DeliveryQueued})
	}
	return d
}

// stepText is a step as the chain's text writes it.
func stepText(st schemas.FallbackStep) string {
	var b strings.Builder
	b.WriteString(strings.Join(st.Channels, "+"))
	if st.AfterMs > 0 {
		b.WriteString(" after " + (time.Duration(st.AfterMs) * time.Millisecond).String())
	}
	if len(st.Unless) > 0 {
		b.WriteString(" unless " + strings.Join(st.Unless, "|"))
	}
	if st.IfFailed {
		b.WriteString(" if failed")
	}
	return b.String()
}

func fmtTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }
