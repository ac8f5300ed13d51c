package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/chdb"
	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// TestDevDeliversFCMWebPushAndTheFeedAndKeepsItsVAPIDKeys: herald dev sends an
// Android push to its FCM emulator and a browser push to a real push
// service (web-push-testing) with the VAPID key its API serves, and keeps
// that key across a restart on the same state dir; the feed item is served
// by its API.
func TestDevDeliversFCMWebPushAndTheFeedAndKeepsItsVAPIDKeys(t *testing.T) {
	requireDev(t)
	push := testenv.WebPushService(t)
	bin := testenv.Herald(t)
	state := t.TempDir()
	kafkaPort, httpPort, chTCP, chHTTP := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	dev := startDev(t, bin, state, kafkaPort, httpPort, chTCP, chHTTP)
	brokers := []string{"127.0.0.1:" + itoa(kafkaPort)}
	cat := topics.New(embedded.CatalogOptions(24 * time.Hour))

	key := vapidKeyOf(t, dev.http)
	// The web client's service worker is served beside the API, allowed to
	// control the whole origin.
	if resp, err := http.Get(dev.http + "/sdk/herald-sw.js"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != 200 || resp.Header.Get("Service-Worker-Allowed") != "/" {
		t.Fatalf("GET /sdk/herald-sw.js: %d, Service-Worker-Allowed %q", resp.StatusCode, resp.Header.Get("Service-Worker-Allowed"))
	}
	sub, hash := subscribeAt(t, push, key)

	nid := identity.DedupeID("dev", "welcome", "u_1", "hello-channels")
	android := schemas.DeliveryCommand{
		DeliveryID: identity.DeliveryID(nid, "pixel"), NotificationID: nid, Tenant: "dev", Type: "welcome", Recipient: "u_1",
		DeviceID: "pixel", Channel: "fcm", Token: "fcm-dev-token-1", CollapseID: nid, Title: "Hello", Body: "from herald dev",
		CreatedAt: time.Now().UnixMilli(),
	}
	browser := android
	browser.DeliveryID, browser.DeviceID, browser.Channel, browser.Token = identity.DeliveryID(nid, "firefox"), "firefox", "webpush", ""
	browser.WebPush = &schemas.WebPushSubscription{Endpoint: sub.endpoint, P256dh: sub.p256dh, Auth: sub.auth}
	inApp := android
	inApp.DeliveryID, inApp.DeviceID, inApp.Channel, inApp.Token = identity.DeliveryID(nid, "feed"), "feed", "feed", ""
	cl := testenv.Client(t, brokers, append(embedded.ClientOpts(), kgo.RecordPartitioner(cat.Partitioner()))...)
	for _, c := range []*schemas.DeliveryCommand{&android, &browser, &inApp} {
		b, err := schemas.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: cat.Name(topics.Deliveries(c.Channel)), Key: []byte(c.DeliveryID), Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		delivered := map[string]bool{}
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Outcomes), embedded.ClientOpts()...) {
			var o schemas.Outcome
			if schemas.Decode(r.Value, &o) == nil && o.Status == schemas.OutcomeDelivered {
				delivered[o.DeliveryID] = true
			}
		}
		if delivered[android.DeliveryID] && delivered[browser.DeliveryID] && delivered[inApp.DeliveryID] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivered %v, want the FCM, the Web Push and the feed delivery", delivered)
		}
		time.Sleep(300 * time.Millisecond)
	}
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Attempts), embedded.ClientOpts()...) {
		var a schemas.Attempt
		if schemas.Decode(r.Value, &a) == nil && a.DeliveryID == android.DeliveryID && !strings.HasPrefix(a.ProviderMessageID, "projects/herald-dev/messages/") {
			t.Fatalf("the FCM attempt's message id %q is not the emulator's", a.ProviderMessageID)
		}
	}
	var msgs struct {
		Data struct {
			Messages []string `json:"messages"`
		} `json:"data"`
	}
	postJSON(t, push+"/get-notifications", map[string]string{"clientHash": hash}, &msgs)
	if len(msgs.Data.Messages) != 1 || !strings.Contains(msgs.Data.Messages[0], `"id":"`+nid+`"`) {
		t.Fatalf("the push service holds %q, want one push with the notification id", msgs.Data.Messages)
	}

	// The API serves the feed from its own copy of herald.feed, which
	// follows the topic a moment after the sink's commit: poll.
	for {
		req, _ := http.NewRequest("GET", dev.http+"/v1/recipients/u_1/feed", nil)
		req.Header.Set("Authorization", "Bearer "+api.DevAPIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page api.FeedPage
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err == nil && len(page.Items) == 1 && page.Items[0].NotificationID == nid && page.UnreadCount == 1 {
			break
		}
		if err != nil || len(page.Items) > 1 || time.Now().After(deadline) {
			t.Fatalf("the dev feed of u_1: %+v (%v), want the one unread item", page, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	dev.cmd.Process.Kill()
	dev.cmd.Wait()
	again := startDev(t, bin, state, kafkaPort, httpPort, chTCP, chHTTP)
	if k := vapidKeyOf(t, again.http); k != key {
		t.Fatalf("after a restart the VAPID key is %q, want the first start's %q", k, key)
	}
}

func vapidKeyOf(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/v1/webpush/vapid-public-key")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var k struct {
		PublicKey string `json:"publicKey"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&k); err != nil || resp.StatusCode != 200 || len(k.PublicKey) != 87 {
		t.Fatalf("GET vapid-public-key: %d %+v %v", resp.StatusCode, k, err)
	}
	return k.PublicKey
}

func postJSON(t *testing.T, url string, in, out any) {
	t.Helper()
	b, _ := json.Marshal(in)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// requireDev skips t under -short and fails it without the chDB engine
// herald dev needs.
func requireDev(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts herald dev with the chDB server; runs in the full suite")
	}
	if _, err := chdb.FindLib(); err != nil {
		t.Fatalf("chDB engine missing (scripts/install installs it): %v", err)
	}
}
