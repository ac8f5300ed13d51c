package api

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

func TestTheTimelinePlacesAttemptsAndOutcomesByTenantAndNotification(t *testing.T) {
	tr := newTracker(100, time.Minute)
	const id = "52f364d9288c640b306b566e509104bd"
	tr.addRequest(schemas.Request{RequestID: "r1", Tenant: "ta", Type: "t", Recipient: "u", NotificationID: id, Title: "x", Body: "y"}, 10)
	tr.addDecision(schemas.Decision{Stage: "dedupe", Outcome: schemas.DecisionAccepted, RequestID: "r1", Tenant: "ta", NotificationID: id, At: 10}, true)
	tr.addOutcome(schemas.Outcome{DeliveryID: "d1", NotificationID: id, Tenant: "ta", DeviceID: "phone", Channel: "apns",
		Status: schemas.OutcomeDelivered, Attempts: 2, At: 30})
	tr.addAttempt(schemas.Attempt{DeliveryID: "d1", NotificationID: id, Tenant: "ta", DeviceID: "phone", Channel: "apns", Attempt: 2,
		Result: schemas.AttemptSent, At: 30})
	tr.addAttempt(schemas.Attempt{DeliveryID: "d1", NotificationID: id, Tenant: "ta", DeviceID: "phone", Channel: "apns", Attempt: 1,
		Result: schemas.AttemptRetryable, Classification: "throttled", ProviderReason: "TooManyRequests", At: 20})
	tr.addAttempt(schemas.Attempt{DeliveryID: "d9", NotificationID: id, Tenant: "tb", Attempt: 1, Result: schemas.AttemptSent, At: 25})
	tr.addAttempt(schemas.Attempt{DeliveryID: "d8", NotificationID: id, Attempt: 1, Result: schemas.AttemptSent, At: 25})

	t.Run("the owner's timeline lists request, decision, attempts and outcome in order", func(t *testing.T) {
		rec, ok := tr.record("ta", id)
		if !ok {
			t.Fatal("no record")
		}
		want := []sdk.TimelineEvent{
			{At: 10, Kind: sdk.EventRequested, RequestID: "r1"},
			{At: 10, Kind: sdk.EventDecision, RequestID: "r1", Stage: "dedupe", Outcome: schemas.DecisionAccepted},
			{At: 20, Kind: sdk.EventAttempt, DeliveryID: "d1", Channel: "apns", DeviceID: "phone", Attempt: 1,
				Result: schemas.AttemptRetryable, Classification: "throttled", Reason: "TooManyRequests"},
			{At: 30, Kind: sdk.EventAttempt, DeliveryID: "d1", Channel: "apns", DeviceID: "phone", Attempt: 2, Result: schemas.AttemptSent},
			{At: 30, Kind: sdk.EventOutcome, DeliveryID: "d1", Channel: "apns", DeviceID: "phone", Status: schemas.OutcomeDelivered, Attempts: 2},
		}
		if len(rec.Timeline) != len(want) {
			t.Fatalf("timeline %+v, want %+v", rec.Timeline, want)
		}
		for i := range want {
			if rec.Timeline[i] != want[i] {
				t.Fatalf("event %d: %+v, want %+v", i, rec.Timeline[i], want[i])
			}
		}
		if rec.Status != schemas.DecisionAccepted {
			t.Fatalf("status %q, want the decision's", rec.Status)
		}
	})
	t.Run("attempts alone do not make a notification visible to another tenant", func(t *testing.T) {
		if rec, ok := tr.record("tb", id); ok {
			t.Fatalf("tenant tb reads %+v", rec)
		}
	})
}
