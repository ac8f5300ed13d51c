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
	place(t, tr.addRequest(encode(t, &schemas.Request{RequestID: "r1", Tenant: "ta", Type: "t", Recipient: "u", NotificationID: id, Title: "x", Body: "y"}), 10))
	place(t, tr.addDecision(encode(t, &schemas.Decision{Stage: "dedupe", Outcome: schemas.DecisionAccepted, RequestID: "r1", Tenant: "ta", NotificationID: id, At: 10}), true))
	place(t, tr.addOutcome(encode(t, &schemas.Outcome{DeliveryID: "d1", NotificationID: id, Tenant: "ta", DeviceID: "phone", Channel: "apns",
		Status: schemas.OutcomeDelivered, Attempts: 2, At: 30})))
	place(t, tr.addAttempt(encode(t, &schemas.Attempt{DeliveryID: "d1", NotificationID: id, Tenant: "ta", DeviceID: "phone", Channel: "apns", Attempt: 2,
		Result: schemas.AttemptSent, At: 30})))
	place(t, tr.addAttempt(encode(t, &schemas.Attempt{DeliveryID: "d1", NotificationID: id, Tenant: "ta", DeviceID: "phone", Channel: "apns", Attempt: 1,
		Result: schemas.AttemptRetryable, Classification: "throttled", ProviderReason: "TooManyRequests", At: 20})))
	place(t, tr.addAttempt(encode(t, &schemas.Attempt{DeliveryID: "d9", NotificationID: id, Tenant: "tb", Attempt: 1, Result: schemas.AttemptSent, At: 25})))
	place(t, tr.addAttempt(encode(t, &schemas.Attempt{DeliveryID: "d8", NotificationID: id, Attempt: 1, Result: schemas.AttemptSent, At: 25})))

	t.Run("the owner's timeline lists request, decision, attempts and outcome in order", func(t *testing.T) {
		rec, ok := tr.record("ta", id)
		if !ok {
			t.Fatal("no record")
		}
		want := []sdk.TimelineEvent{
			{At: atMs(10), Kind: sdk.EventRequested, RequestID: "r1"},
			{At: atMs(10), Kind: sdk.EventDecision, RequestID: "r1", Stage: "dedupe", Outcome: schemas.DecisionAccepted},
			{At: atMs(20), Kind: sdk.EventAttempt, DeliveryID: "d1", Channel: "apns", DeviceID: "phone", Attempt: 1,
				Result: schemas.AttemptRetryable, Classification: "throttled", Reason: "TooManyRequests"},
			{At: atMs(30), Kind: sdk.EventAttempt, DeliveryID: "d1", Channel: "apns", DeviceID: "phone", Attempt: 2, Result: schemas.AttemptSent},
			{At: atMs(30), Kind: sdk.EventOutcome, DeliveryID: "d1", Channel: "apns", DeviceID: "phone", Status: schemas.OutcomeDelivered, Attempts: 2},
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

// encode returns r as herald writes it to its topic.
func encode(t *testing.T, r schemas.Record) []byte {
	t.Helper()
	b, err := schemas.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// place fails the test when a record was not placed for an error.
func place(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestTheReadModelKeepsCopiesOfTheRecordsItReads(t *testing.T) {
	// The consumer hands the tracker values it reads in place; a fetch
	// buffer that changed after a record was placed must change nothing
	// the tracker holds: not the note's events, not its key, not the
	// quota's tenant.
	const id = "0f9e8d7c6b5a49382716f5e4d3c2b1a0"
	for _, f := range []schemas.Format{schemas.FormatBinary, schemas.FormatJSON} {
		t.Run("in records "+string(f), func(t *testing.T) {
			tr := newTracker(100, time.Minute)
			req := encode(t, &schemas.Request{Schema: f.RequestSchema(), RequestID: "r1", Tenant: "ta", Type: "t", Recipient: "u", NotificationID: id, Title: "x"})
			dec := encode(t, &schemas.Decision{Schema: f.DecisionSchema(), Stage: "dedupe", Outcome: schemas.DecisionAccepted, RequestID: "r1",
				Tenant: "ta", NotificationID: id, At: 61_000})
			place(t, tr.addRequest(req, 61_000))
			place(t, tr.addDecision(dec, true))
			for _, b := range [][]byte{req, dec} {
				for i := range b {
					b[i] = 'z'
				}
			}
			rec, ok := tr.record("ta", id)
			if !ok {
				t.Fatal("the notification is gone once the buffers it was read from changed")
			}
			if rec.RequestID != "r1" || rec.Title != "x" || rec.Status != schemas.DecisionAccepted || len(rec.Timeline) != 2 {
				t.Fatalf("record %+v", rec)
			}
			if n, _ := tr.acceptedIn("ta", 61_000); n != 1 {
				t.Fatalf("tenant ta's accepted count is %d, want 1", n)
			}

			// The live consumer's decision, handed to the call waiting
			// for it.
			w := tr.expect("r2", []string{id}, false)
			live := encode(t, &schemas.Decision{Schema: f.DecisionSchema(), Stage: "dedupe", Outcome: schemas.DecisionDuplicate, RequestID: "r2",
				Tenant: "ta", NotificationID: id, At: 62_000})
			var d schemas.Decision
			var shared schemas.Decoder
			if err := shared.DecodeShared(live, &d); err != nil {
				t.Fatal(err)
			}
			tr.addLive(&d, live, false, true) // a reply
			for i := range live {
				live[i] = 'z'
			}
			got, complete := tr.wait(t.Context(), "r2", w, time.Second)
			if g := got[id]; !complete || g.RequestID != "r2" || g.Outcome != schemas.DecisionDuplicate || g.Tenant != "ta" {
				t.Fatalf("the waiting call got %+v (complete %v)", got, complete)
			}
		})
	}
}

func TestARecordThatDoesNotDecodeIsPlacedNowhere(t *testing.T) {
	tr := newTracker(100, time.Minute)
	for name, add := range map[string]func([]byte) error{
		"request":  func(b []byte) error { return tr.addRequest(b, 1) },
		"decision": func(b []byte) error { return tr.addDecision(b, true) },
		"attempt":  tr.addAttempt,
		"outcome":  tr.addOutcome,
		"receipt":  tr.addReceipt,
	} {
		if err := add([]byte(`{"schema":"nope"}`)); err == nil {
			t.Errorf("a %s of another schema was placed", name)
		}
	}
	if len(tr.notes) != 0 || len(tr.accepted) != 0 {
		t.Fatalf("notes %v, accepted %v: want none", tr.notes, tr.accepted)
	}
}

// atMs is a timeline time of ms since the epoch, as the API answers it.
func atMs(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
