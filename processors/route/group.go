package route

import (
	"context"
	"fmt"
	"strings"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
)

// # Group targets: resolved here, where the registry lives
//
// A send to a tag, a segment or every user of a tenant ("all") is one
// notification until it reaches this stage: the API (or any producer)
// writes one request whose recipient is the group's name in a reserved
// form (GroupRecipient: "@all", "@tag:<tag>", "@segment:<name>"), the
// dedupe stage decides it as any other notification (its id, idempotency
// and dedupe scope are the group's), and the route stage turns the
// accepted notification into one accepted notification per member, each
// written back to herald.accepted keyed by its own recipient, so that the
// task owning that recipient's rate counters, digests and quiet hours
// decides it as it decides any other (fan-out step).
//
// Exactly once. The members are resolved and the per-member notifications
// written in the transaction that commits the group notification's input
// offset, with the group's own decision (outcome routed, the members and
// their notification ids in Detail; no_target when the group reaches no
// one or the segment does not exist; rejected beyond MaxFanOut). They are
// outputs of the stage runtime's transaction like its delivery commands,
// whose exactly-once through SIGKILLs TestExactlyOnceThroughSIGKILLsAndRebalances
// tests: a crash before the commit aborts all of them and the group
// notification is read again (the task test of an aborted fan-out), after
// it its offset is past. Replay (replay.go) does not re-resolve a group:
// it compares the members' decisions. Each member's notification id
// is derived from the group notification's id and the member
// (FanOutID), and its occurrence from that id and the group's acceptance
// time, so a replay derives the same ids and deliveries, and a group
// notification accepted again after its dedupe window is a new
// occurrence for every member. Members are resolved once: a retry of the
// send is the dedupe stage's replay or duplicate of the group
// notification, never a second resolution.
//
// Where the registry lives. Every route instance holds every recipient's
// devices (Table reads herald.devices whole) and every segment
// (herald.segments), so a task resolves a group over all partitions. It
// first waits until the table has read every partition of devices,
// preferences and segments up to their ends as listed then (SyncGroups):
// a device or segment change acknowledged before the group notification
// is decided is seen by it. "all" is every user of the tenant with an
// enabled, not retired device; tag those of them with such a device
// carrying the tag; segment the segment's members (sorted, each once).
// A member whose own id has the reserved form is skipped: groups do not
// nest. Resolving all and tag scans every device of every tenant.

// Kinds of group target (the API's target kinds of the same names).
const (
	GroupAll     = "all"
	GroupTag     = "tag"
	GroupSegment = "segment"
)

// DefaultMaxFanOut bounds the members one group notification reaches when
// Policy.MaxFanOut is zero: they are written in one transaction.
const DefaultMaxFanOut = 10_000

// Group is a group target: its kind and its tag or segment name (empty for
// all).
type Group struct{ Kind, Name string }

// GroupRecipient is the recipient a send to a group names: "@all",
// "@tag:<tag>" or "@segment:<name>".
func GroupRecipient(g Group) string {
	if g.Kind == GroupAll {
		return "@" + GroupAll
	}
	return "@" + g.Kind + ":" + g.Name
}

// ParseGroup reads a recipient of GroupRecipient's form; any other
// recipient is a user (ok false).
func ParseGroup(recipient string) (Group, bool) {
	if recipient == "@"+GroupAll {
		return Group{Kind: GroupAll}, true
	}
	for _, kind := range []string{GroupTag, GroupSegment} {
		if name, ok := strings.CutPrefix(recipient, "@"+kind+":"); ok && name != "" {
			return Group{Kind: kind, Name: name}, true
		}
	}
	return Group{}, false
}

// IsGroupRecipient reports whether a recipient id has the reserved form of
// a group target (the API refuses such ids as users).
func IsGroupRecipient(recipient string) bool {
	_, ok := ParseGroup(recipient)
	return ok || recipient == "@tag:" || recipient == "@segment:"
}

// Groups is what a Directory that resolves group targets adds.
type Groups interface {
	// Members returns the users a group reaches in a tenant, sorted and
	// each once; known is false for a segment that does not exist.
	Members(tenant string, g Group) (users []string, known bool)
	// SyncGroups returns once every device, preference and segment change
	// written, on any partition, before the call is applied.
	SyncGroups(ctx context.Context) error
}

// FanOutID is the notification id of a group notification's member.
func FanOutID(tenant, typ, member, groupNotificationID string) string {
	return identity.DedupeID(tenant, typ, member, "herald:fanout:"+groupNotificationID)
}

// maxListed members are named in a fan-out decision's Detail; the others
// are counted.
const maxListed = 50

// FanOut is the pure decision for an accepted notification n addressed to
// group g, whose members (and whether the group is known) the directory
// gave: the group notification's decision, and the members' notifications
// in Result.Accepted. See the comment at the top of this file.
func (p Policy) FanOut(n schemas.Accepted, g Group, at int64, src Source, members []string, known bool) Result {
	d := decision(n, at, src, "route/"+src.Topic+"/"+fmt.Sprint(src.Partition)+"/"+fmt.Sprint(src.Offset))
	if msg := invalid(n); msg != "" {
		d.Outcome, d.Detail = schemas.DecisionRejected, msg
		return Result{Decisions: []schemas.Decision{d}}
	}
	users := make([]string, 0, len(members))
	for _, m := range members {
		if m != "" && !IsGroupRecipient(m) && (len(users) == 0 || users[len(users)-1] != m) {
			users = append(users, m)
		}
	}
	limit := p.MaxFanOut
	if limit <= 0 {
		limit = DefaultMaxFanOut
	}
	if !known {
		d.Outcome, d.Detail = schemas.DecisionNoTarget, "no such segment "+g.Name
		return Result{Decisions: []schemas.Decision{d}}
	} else if len(users) == 0 {
		d.Outcome, d.Detail = schemas.DecisionNoTarget, "the target "+GroupRecipient(g)+" reaches no one"
		return Result{Decisions: []schemas.Decision{d}}
	} else if len(users) > limit {
		d.Outcome = schemas.DecisionRejected
		d.Detail = fmt.Sprintf("the target %s reaches %d recipients; at most %d in one notification", GroupRecipient(g), len(users), limit)
		return Result{Decisions: []schemas.Decision{d}}
	}
	var res Result
	var detail strings.Builder
	fmt.Fprintf(&detail, "fanned out to %d recipients:", len(users))
	for i, u := range users {
		c := n
		c.Recipient, c.TargetDevice = u, ""
		c.NotificationID = FanOutID(n.Tenant, n.Type, u, n.NotificationID)
		if n.OccurrenceID != "" {
			c.OccurrenceID = identity.OccurrenceID(c.NotificationID, n.AcceptedAt)
		}
		res.Accepted = append(res.Accepted, c)
		if i < maxListed {
			fmt.Fprintf(&detail, " %s (%s)", u, c.NotificationID)
		}
	}
	if len(users) > maxListed {
		fmt.Fprintf(&detail, " and %d more", len(users)-maxListed)
	}
	d.Outcome, d.Detail = schemas.DecisionRouted, detail.String()
	res.Decisions = []schemas.Decision{d}
	return res
}
