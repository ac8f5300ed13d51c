package email_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/email"
	"github.com/heraldhq/herald/sinks/email/emulator"
	"github.com/heraldhq/herald/sinks/sinktest"
)

// TestEachEmailDeliveryOnceUnlessAuditedAmbiguousThroughSIGKILLs: two
// `herald sink --channel email` processes send 300 deliveries (and 50
// repeats) to 30 addresses through the SMTP emulator, which cuts 5% of the
// connections after the end of data (keeping the message) and defers 5%
// with a 451; the processes are SIGKILLed at random. Every delivery
// reaches the server at least once, more than once only if an attempt is
// audited ambiguous, always with its own Message-ID; one outcome each.
func TestEachEmailDeliveryOnceUnlessAuditedAmbiguousThroughSIGKILLs(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 4)
	e := startEmulator(t, emulator.Options{Latency: 30 * time.Millisecond}) // slow enough for the kills to land mid-run
	e.SetFaults(emulator.Faults{ResetRate: 0.05})
	e.SetFailureRates(0.05, 0)
	host, port, _ := net.SplitHostPort(e.Addr())

	cmds := make([]*schemas.DeliveryCommand, 300)
	byMessageID, addressOf := map[string]string{}, map[string]string{}
	for i := range cmds {
		nid := identity.DedupeID("acme", "t", "u1", fmt.Sprint("n", i))
		dev := fmt.Sprint("m", i%30)
		cmds[i] = &schemas.DeliveryCommand{DeliveryID: identity.DeliveryID(nid, dev), NotificationID: nid, Tenant: "acme", Type: "t",
			Recipient: "u1", DeviceID: dev, Channel: email.Channel, Token: dev + "@example.com", CollapseID: nid, Title: "t", Body: "b",
			CreatedAt: time.Now().UnixMilli(), ExpiresAt: time.Now().Add(time.Hour).UnixMilli()}
		byMessageID["<"+email.MessageID(cmds[i].DeliveryID, "herald.test")+">"] = cmds[i].DeliveryID
		addressOf[cmds[i].DeliveryID] = cmds[i].Token
	}
	a := sinktest.Crash{Channel: email.Channel, Commands: cmds, Repeats: 50, Kills: 5,
		Args: []string{"--email-smtp-host", host, "--email-smtp-port", port, "--email-tls", "none", "--email-from", "no-reply@herald.test",
			"--email-max-connections", "2"}}.Run(t, brokers, cat)

	arrivals := map[string]int{}
	for _, m := range e.Received() {
		if !m.Kept {
			continue // answered 451: the server does not have it
		}
		id, ok := byMessageID[m.MessageID]
		if !ok {
			t.Fatalf("a message with Message-ID %q, which is no delivery's", m.MessageID)
		}
		if len(m.To) != 1 || m.To[0] != addressOf[id] {
			t.Fatalf("delivery %s went to %v, want %s", id, m.To, addressOf[id])
		}
		arrivals[id]++
	}
	twice := sinktest.CheckOnce(t, a, cmds, arrivals)
	t.Logf("%d deliveries reached the server more than once (all audited ambiguous, one Message-ID each)", twice)
}
