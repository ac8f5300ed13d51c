package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/chdb"
	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

func TestDevDeliversAPNsPushesToItsEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("starts herald dev with the chDB server; runs in the full suite")
	}
	if _, err := chdb.FindLib(); err != nil {
		t.Fatalf("chDB engine missing (scripts/install installs it): %v", err)
	}
	bin := testenv.Herald(t)
	kafkaPort, httpPort, chTCP, chHTTP := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	dev := startDev(t, bin, t.TempDir(), kafkaPort, httpPort, chTCP, chHTTP)
	brokers := []string{"127.0.0.1:" + itoa(kafkaPort)}
	cat := topics.New(embedded.CatalogOptions(24 * time.Hour))

	nid := identity.DedupeID("dev", "welcome", "u_1", "hello")
	cmd := schemas.DeliveryCommand{
		DeliveryID: identity.DeliveryID(nid, "iphone"), NotificationID: nid, Tenant: "dev", Type: "welcome", Recipient: "u_1",
		DeviceID: "iphone", Channel: "apns", Token: "0a1b2c", CollapseID: nid, APNsID: identity.APNsID(nid),
		Title: "Hello", Body: "from herald dev", CreatedAt: time.Now().UnixMilli(),
	}
	b, err := schemas.Encode(&cmd)
	if err != nil {
		t.Fatal(err)
	}
	cl := testenv.Client(t, brokers, append(embedded.ClientOpts(), kgo.RecordPartitioner(cat.Partitioner()))...)
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: cat.Name(topics.Deliveries("apns")), Key: []byte(cmd.DeliveryID), Value: b}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var delivered bool
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Outcomes), embedded.ClientOpts()...) {
			var o schemas.Outcome
			if schemas.Decode(r.Value, &o) == nil && o.DeliveryID == cmd.DeliveryID {
				delivered = o.Status == schemas.OutcomeDelivered
			}
		}
		logText, _ := os.ReadFile(dev.log)
		if delivered {
			if !strings.Contains(string(logText), `msg="apns emulator received a push"`) || !strings.Contains(string(logText), "apns_id="+cmd.APNsID) {
				t.Fatalf("outcome delivered, but the emulator logged no push with apns-id %s:\n%s", cmd.APNsID, logText)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no delivered outcome for %s:\n%s", cmd.DeliveryID, logText)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
