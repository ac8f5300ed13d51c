package audit

import (
	"time"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

// NotificationStatus is a notification's status (GET
// /v1/notifications/{id}, the dashboard's timeline), from
// what herald recorded about its first request, moving as the pipeline
// does:
//
//   - pending: no dedupe decision yet;
//   - the dedupe decision's outcome when it is not accepted (duplicate,
//     idempotent_replay, idempotency_conflict, rejected): nothing was sent;
//   - accepted: accepted, not routed yet;
//   - the route decision's outcome when it made no delivery (rate_limited,
//     digested, opted_out, no_target);
//   - routed: routed, and some delivery has no final outcome yet (queued,
//     deferred to the end of quiet hours, or retrying);
//   - once every delivery has its final outcome: delivered (all of them),
//     partially_delivered (some), expired (none, every one expired) or
//     failed (none: failed, dead-lettered, device retired).
//
// finals holds each delivery's final outcome by delivery id (the latest,
// if a delivery has several: a later occurrence of the notification reuses
// its delivery ids).
func NotificationStatus(dedupe string, route *schemas.Decision, finals map[string]string) string {
	switch {
	case dedupe == "":
		return sdk.StatusPending
	case dedupe != schemas.DecisionAccepted:
		return dedupe
	case route == nil:
		return schemas.DecisionAccepted
	case len(route.Deliveries) == 0:
		return route.Outcome
	}
	delivered, expired := 0, 0
	for _, d := range route.Deliveries {
		f, ok := finals[d.DeliveryID]
		if !ok {
			return sdk.StatusRouted
		}
		if f == schemas.OutcomeDelivered {
			delivered++
		} else if f == schemas.OutcomeExpired {
			expired++
		}
	}
	n := len(route.Deliveries)
	if delivered == n {
		return sdk.StatusDelivered
	} else if delivered > 0 {
		return sdk.StatusPartiallyDelivered
	} else if expired == n {
		return sdk.StatusExpired
	}
	return sdk.StatusFailed
}

// Status is the status (NotificationStatus) of notification id in the
// timeline: of its first request (the earliest), from that request's
// dedupe decision, the route stage's decision about it (with the
// deliveries it made) and the deliveries' latest outcomes.
func (tl *Timeline) Status(id string) string {
	req, first := "", time.Time{}
	for _, r := range tl.Requests {
		if r.NotificationID == id && (req == "" || r.At.Before(first)) {
			req, first = r.RequestID, r.At
		}
	}
	dedupe := ""
	var route *schemas.Decision
	for _, d := range tl.Decisions {
		if d.NotificationID != id || d.RequestID != req && req != "" {
			continue
		}
		if d.Stage == "dedupe" && dedupe == "" {
			dedupe, req = d.Outcome, d.RequestID
		}
		if d.Stage == "route" && d.Channel == "" && route == nil {
			route = &schemas.Decision{Stage: d.Stage, Outcome: d.Outcome}
			for _, did := range d.DeliveryIDs {
				route.Deliveries = append(route.Deliveries, schemas.DecisionDelivery{DeliveryID: did})
			}
		}
	}
	finals, at := map[string]string{}, map[string]time.Time{}
	for _, o := range tl.Outcomes {
		if o.NotificationID == id && !o.At.Before(at[o.DeliveryID]) {
			finals[o.DeliveryID], at[o.DeliveryID] = o.Status, o.At
		}
	}
	return NotificationStatus(dedupe, route, finals)
}

// FinalsOf is each delivery's final outcome in a timeline sorted by time:
// the latest outcome event of each delivery id.
func FinalsOf(tl []sdk.TimelineEvent) map[string]string {
	finals := map[string]string{}
	for _, e := range tl {
		if e.Kind == sdk.EventOutcome && e.DeliveryID != "" {
			finals[e.DeliveryID] = e.Status
		}
	}
	return finals
}

// DedupeOutcome is the outcome of the dedupe stage's first decision about
// request req in a timeline sorted by time ("" when there is none).
func DedupeOutcome(tl []sdk.TimelineEvent, req string) string {
	for _, e := range tl {
		if e.Kind == sdk.EventDecision && e.Stage == "dedupe" && e.RequestID == req {
			return e.Outcome
		}
	}
	return ""
}
