package api

import (
	"context"
	"encoding/json"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

// History: where GET /v1/notifications/{id} finds a notification.
//
// With the audit record configured (Config.Dashboard: ClickHouse), the
// API reads no history from Kafka: a notification is read from the audit,
// which holds every notification for a year, from any instance, however
// many were sent since. The audit trails the pipeline by the audit
// writer's batch (about a second), so each instance also keeps a bounded
// cache (MaxTracked) of its own sends and the decisions it was answered;
// a notification the audit does not hold yet is answered from there
// (status and the decisions its caller waited for; attempts and outcomes
// appear once the audit has them).
//
// Without the audit (a deployment with no ClickHouse, the tests of this
// package), the read model consumes herald.requests, herald.decisions,
// herald.attempts, herald.outcomes and herald.receipts from Lookback ago
// and holds the newest MaxTracked notifications: history then ends there.

// historyFromAudit reports whether GET /v1/notifications/{id} reads the
// audit record (and the read model consumer does not run).
func (c *Config) historyFromAudit() bool { return c.Dashboard != nil && c.Dashboard.Conn != nil }

// auditRecord reads tenant's notification id from the audit record; false
// when the audit holds none of it for tenant.
func (s *Server) auditRecord(ctx context.Context, tenant, id string) (sdk.NotificationRecord, bool, error) {
	tl, err := audit.Load(ctx, s.cfg.Dashboard.Conn, s.cfg.Dashboard.Database, audit.Selector{NotificationID: id, Tenant: tenant})
	if err != nil {
		return sdk.NotificationRecord{}, false, err
	}
	rec, ok := recordFromAudit(tl, id)
	return rec, ok, nil
}

// recordFromAudit is the API's record of notification id from its audit
// timeline: the first request's fields, its status (statusOf: the first
// request's decisions and its deliveries' outcomes), and every request, decision, attempt,
// outcome and receipt as a timeline event, in time order. false when the
// timeline holds no request and no decision of id.
func recordFromAudit(tl *audit.Timeline, id string) (sdk.NotificationRecord, bool) {
	rec := sdk.NotificationRecord{ID: id, Status: sdk.StatusPending, Timeline: []sdk.TimelineEvent{}}
	for _, r := range tl.Requests {
		if r.NotificationID != id {
			continue
		}
		if rec.RequestID == "" {
			rec.Type, rec.Recipient, rec.Title, rec.Body, rec.Locale, rec.Channels = r.Type, r.Recipient, r.Title, r.Body, r.Locale, r.Channels
			if r.Payload != "" {
				rec.Payload = json.RawMessage(r.Payload)
			}
			rec.DedupeKey, rec.IdempotencyKey, rec.IDSource = r.DedupeKey, r.IdempotencyKey, r.IDSource
			rec.RequestID, rec.Producer, rec.Source, rec.CreatedAt = r.RequestID, r.Producer, r.Source, r.At.UnixMilli()
		}
		rec.Timeline = append(rec.Timeline, sdk.TimelineEvent{At: r.At.UTC(), Kind: sdk.EventRequested, RequestID: r.RequestID, Producer: r.Producer})
	}
	for _, d := range tl.Decisions {
		if d.NotificationID != id {
			continue
		}
		if rec.RequestID == "" { // decisions alone: an SDK request the audit has not written yet
			rec.Type, rec.Recipient, rec.RequestID, rec.IDSource, rec.Source = d.Type, d.Recipient, d.RequestID, "unknown", "unknown"
		}
		rec.Timeline = append(rec.Timeline, sdk.TimelineEvent{At: d.At.UTC(), Kind: sdk.EventDecision, RequestID: d.RequestID,
			Stage: d.Stage, Outcome: d.Outcome, Detail: d.Detail, OriginalRequestID: d.OriginalRequestID})
	}
	if rec.RequestID == "" {
		return sdk.NotificationRecord{}, false
	}
	for _, a := range tl.Attempts {
		if a.NotificationID == id {
			rec.Timeline = append(rec.Timeline, sdk.TimelineEvent{At: a.At.UTC(), Kind: sdk.EventAttempt, DeliveryID: a.DeliveryID,
				Channel: a.Channel, DeviceID: a.DeviceID, Attempt: int(a.Attempt), Result: a.Result, Classification: a.Classification, Reason: a.ProviderReason})
		}
	}
	for _, o := range tl.Outcomes {
		if o.NotificationID == id {
			rec.Timeline = append(rec.Timeline, sdk.TimelineEvent{At: o.At.UTC(), Kind: sdk.EventOutcome, DeliveryID: o.DeliveryID,
				Channel: o.Channel, DeviceID: o.DeviceID, Status: o.Status, Attempts: int(o.Attempts), Reason: o.Reason})
		}
	}
	for _, r := range tl.Receipts {
		if r.NotificationID == id {
			rec.Timeline = append(rec.Timeline, sdk.TimelineEvent{At: r.At.UTC(), Kind: sdk.EventReceipt, DeliveryID: r.DeliveryID,
				Channel: r.Channel, DeviceID: r.DeviceID, Receipt: r.Kind, ReceiptID: r.ReceiptID})
		}
	}
	sortTimeline(rec.Timeline)
	var route *schemas.Decision
	if rd, ok := routeDecisionFromAudit(tl, id, rec.RequestID); ok {
		route = &rd
	}
	rec.Status = audit.NotificationStatus(audit.DedupeOutcome(rec.Timeline, rec.RequestID), route, audit.FinalsOf(rec.Timeline))
	return rec, true
}
