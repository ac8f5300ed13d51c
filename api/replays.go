package api

import (
	"context"
	"time"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/schemas"
)

// Replays answer what the original answered.
//
// An idempotent replay is decided by the dedupe stage, which answers the
// original request id and outcome; the route stage never sees a replay. The
// original's deliveries (and the route stage's skip, if it skipped it) are
// in the route stage's decision about the original request, which the API
// finds, in this order: in its tracker (the instance's cache of its own
// sends and their answers, or the read model where no audit is
// configured), then in the audit record (the decisions table keeps a route
// decision's deliveries, migration 0007), from any instance and after a
// restart. The route decision reaches the audit about a second after it is
// made (the audit writer's batch), so a replay of an accepted original
// looks again, every replayPoll, for up to replayRouteWait (bounded by the
// send's own wait). A replay whose original route decision cannot be found
// in that time answers no deliveries, as before; its notification's record
// shows them.
const (
	replayRouteWait = 3 * time.Second
	replayPoll      = 100 * time.Millisecond
)

// replayRoutes adds to routed the route decision about the original
// request of every replay in got whose original was accepted, where it
// can be found by deadline.
func (s *Server) replayRoutes(ctx context.Context, tenant string, got, routed map[string]schemas.Decision, deadline time.Time) {
	want := map[string]string{} // notification id → original request id
	for id, d := range got {
		if _, ok := routed[id]; ok || d.Outcome != schemas.DecisionIdempotentReplay || d.OriginalRequestID == "" {
			continue
		}
		if d.OriginalOutcome != "" && d.OriginalOutcome != schemas.DecisionAccepted {
			continue // a duplicate, a conflict: never routed
		}
		want[id] = d.OriginalRequestID
	}
	for len(want) > 0 {
		for id, req := range want {
			if rd, ok := s.tr.routeDecision(tenant, id, req); ok {
				routed[id] = rd
				delete(want, id)
				continue
			}
			if !s.cfg.historyFromAudit() {
				continue
			}
			tl, err := audit.Load(ctx, s.cfg.Dashboard.Conn, s.cfg.Dashboard.Database, audit.Selector{NotificationID: id, Tenant: tenant})
			if err != nil {
				s.log.Warn("replay: the audit did not answer", "notification_id", id, "err", err)
				continue
			}
			if rd, ok := routeDecisionFromAudit(tl, id, req); ok {
				routed[id] = rd
				delete(want, id)
			}
		}
		if len(want) == 0 || time.Now().Add(replayPoll).After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(replayPoll):
		}
	}
}

// routeDecisionFromAudit is the route stage's decision about request req of
// notification id (the notification's decision, not a channel's), with its
// deliveries, from an audit timeline.
func routeDecisionFromAudit(tl *audit.Timeline, id, req string) (schemas.Decision, bool) {
	for _, d := range tl.Decisions {
		if d.NotificationID != id || d.RequestID != req || d.Stage != "route" || d.Channel != "" {
			continue
		}
		rd := schemas.Decision{Stage: d.Stage, Outcome: d.Outcome, RequestID: d.RequestID, NotificationID: d.NotificationID}
		for i, did := range d.DeliveryIDs {
			dd := schemas.DecisionDelivery{DeliveryID: did}
			if i < len(d.DeliveryChannels) {
				dd.Channel = d.DeliveryChannels[i]
			}
			if i < len(d.DeliveryDevices) {
				dd.DeviceID = d.DeliveryDevices[i]
			}
			if i < len(d.DeliveryStates) {
				dd.State = d.DeliveryStates[i]
			}
			rd.Deliveries = append(rd.Deliveries, dd)
		}
		return rd, true
	}
	return schemas.Decision{}, false
}
