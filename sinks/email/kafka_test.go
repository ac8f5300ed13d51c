package email_test

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/email"
	"github.com/heraldhq/herald/sinks/email/emulator"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/topics"
)

// TestTheEmailSinkSendsOneEmailThroughACutAndRetiresAnUnknownMailboxOnTheRealBroker:
// on the real broker, through the SMTP emulator:
//   - an address whose first transaction is cut after the end of data (the
//     server kept the message, the sink got no reply) gets the same
//     message again on the retry: two transactions with one Message-ID,
//     one message in the mailbox, the first attempt audited ambiguous,
//     one outcome delivered; the command sent again is not sent again;
//   - an address the server answers 550 5.1.1 is retired: outcome
//     device_retired, herald.devices disables it, one attempt.
func TestTheEmailSinkSendsOneEmailThroughACutAndRetiresAnUnknownMailboxOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	e := startEmulator(t, emulator.Options{})
	p := newProvider(t, e, email.Config{})
	e.AddRule(emulator.Rule{Address: "cut@example.com", Cut: true, Times: 1})
	e.AddRule(emulator.Rule{Address: "gone@example.com", Code: 550, Enhanced: "5.1.1", Message: "no such user"})

	cut, gone := command("cut@example.com"), command("gone@example.com")
	cut.DeviceID, cut.DeliveryID = "m1", identity.DeliveryID(nid, "m1")
	gone.DeviceID, gone.DeliveryID = "m2", identity.DeliveryID(nid, "m2")
	sinktest.RegisterDevices(t, brokers, cat, cut, gone)
	sinktest.Start(t, sinks.Options{
		Instance: stage.Instance{Brokers: brokers},
		Channel:  email.Channel,
		Provider: p,
		Catalog:  cat,
		Policy:   sinks.Policy{MaxAttempts: 3, Backoff: backoff.Policy{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond}},
	})
	sinktest.Produce(t, brokers, cat, cut, gone)
	a := sinktest.AwaitOutcomes(t, brokers, cat, cut.DeliveryID, gone.DeliveryID)

	t.Run("the cut address gets one email, sent twice with one Message-ID after an audited ambiguous attempt", func(t *testing.T) {
		if o := a.Outcomes[cut.DeliveryID]; len(o) != 1 || o[0].Status != schemas.OutcomeDelivered {
			t.Fatalf("outcomes %+v, want one delivered", o)
		}
		at := a.Attempts[cut.DeliveryID]
		if len(at) != 2 || at[0].Result != schemas.AttemptAmbiguous || at[0].Classification != "no_final_reply" || at[1].Result != schemas.AttemptSent {
			t.Fatalf("attempts %+v, want ambiguous no_final_reply then sent", at)
		}
		var got []emulator.Message
		for _, m := range e.Received() {
			if m.To[0] == "cut@example.com" {
				got = append(got, m)
			}
		}
		want := "<" + email.MessageID(cut.DeliveryID, "herald.test") + ">"
		if len(got) != 2 || got[0].MessageID != want || got[1].MessageID != want {
			t.Fatalf("the server read %d transactions %+v, want two with Message-ID %s", len(got), got, want)
		}
		if box := e.Mailbox("cut@example.com"); len(box) != 1 {
			t.Fatalf("the mailbox shows %d messages, want 1", len(box))
		}
	})
	t.Run("the unknown mailbox is retired after one attempt", func(t *testing.T) {
		if o := a.Outcomes[gone.DeliveryID]; len(o) != 1 || o[0].Status != schemas.OutcomeDeviceRetired {
			t.Fatalf("outcomes %+v, want one device_retired", o)
		}
		if at := a.Attempts[gone.DeliveryID]; len(at) != 1 || at[0].Classification != "mailbox_unavailable" || at[0].ProviderStatus != 550 {
			t.Fatalf("attempts %+v, want one mailbox_unavailable 550", at)
		}
		d, found := a.Devices["m2"]
		if !found || d.Enabled || d.Platform != "email" || d.Token != "gone@example.com" || d.RetiredReason == "" {
			t.Fatalf("device update %+v (found %v), want m2 disabled with its address and a reason", d, found)
		}
		if _, found := a.Devices["m1"]; found {
			t.Fatal("the delivered address was updated")
		}
		if len(e.Mailbox("gone@example.com")) != 0 {
			t.Fatal("the server kept a message for the unknown mailbox")
		}
	})
	t.Run("the command sent again is not sent again", func(t *testing.T) {
		before := e.Total()
		sinktest.Produce(t, brokers, cat, cut)
		deadline := time.Now().Add(2 * time.Minute)
		for {
			dups := 0
			for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions)) {
				var d schemas.Decision
				if schemas.Decode(r.Value, &d) == nil && d.Stage == "sink" && d.Outcome == schemas.DecisionDuplicate && d.Channel == email.Channel {
					dups++
				}
			}
			if dups == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d duplicate decisions, want 1", dups)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if e.Total() != before {
			t.Fatalf("the server read %d more messages, want none", e.Total()-before)
		}
	})
}
