package fcm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/fcm/emulator"
	"github.com/heraldhq/herald/sinks/sinktest"
)

// TestEachFCMDeliveryOnceUnlessAuditedAmbiguousThroughSIGKILLs: two
// `herald sink --channel fcm` processes over 2,000 deliveries (and 200
// repeats), SIGKILLed at random while the emulator resets 2 % of the
// requests after reading them and answers 1 % too late. Every delivery
// reaches the emulator at least once, more than once only if an attempt
// is audited ambiguous, always with its collapse key and apns-collapse-id;
// one outcome each; attempts numbered 1..n.
func TestEachFCMDeliveryOnceUnlessAuditedAmbiguousThroughSIGKILLs(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 4)
	em, err := emulator.Start(emulator.Options{ProjectID: "herald-test", Latency: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	em.SetFaults(emulator.Faults{ResetRate: 0.02, SlowRate: 0.01, SlowDelay: 5 * time.Second})
	key := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(key, em.ServiceAccountJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	cmds := make([]*schemas.DeliveryCommand, 2000)
	for i := range cmds {
		nid := identity.DedupeID("acme", "t", "u1", fmt.Sprint("n", i))
		dev := fmt.Sprint("a", i%500)
		cmds[i] = &schemas.DeliveryCommand{DeliveryID: identity.DeliveryID(nid, dev), NotificationID: nid, Tenant: "acme", Type: "t",
			Recipient: "u1", DeviceID: dev, Channel: "fcm", Token: "fcm-token-" + dev, CollapseID: nid, Title: "t", Body: "b",
			CreatedAt: time.Now().UnixMilli(), ExpiresAt: time.Now().Add(time.Hour).UnixMilli()}
	}
	a := sinktest.Crash{Channel: "fcm", Commands: cmds, Repeats: 200, Kills: 8,
		Args: []string{"--fcm-endpoint", em.URL() + "/v1", "--fcm-credentials-file", key}}.Run(t, brokers, cat)

	arrivals := map[string]int{}
	byDelivery := map[string]*schemas.DeliveryCommand{}
	for _, c := range cmds {
		byDelivery[c.DeliveryID] = c
	}
	for _, m := range em.Received() {
		arrivals[m.DeliveryID]++
		if c := byDelivery[m.DeliveryID]; c != nil && (m.CollapseKey != c.NotificationID || m.APNsCollapseID != c.NotificationID || m.NotificationID != c.NotificationID) {
			t.Errorf("%s: a message carried collapse key %s, apns-collapse-id %s, id %s; want %s", c.DeliveryID, m.CollapseKey, m.APNsCollapseID, m.NotificationID, c.NotificationID)
		}
	}
	twice := sinktest.CheckOnce(t, a, cmds, arrivals)
	t.Logf("%d messages read, %d deliveries arrived more than once (all audited ambiguous)", em.Total(), twice)
}
