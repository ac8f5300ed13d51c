package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sdk"
)

// TestOneSendReachesEveryChannelOnceThroughHeraldDev is issue 12's end to
// end: through `herald dev` (API, dedupe, route, the four sinks, the
// webhook fan-out and sink), one POST /v1/notifications to a user with an
// iPhone, an Android phone and a browser subscription reaches the APNs
// emulator, the FCM emulator, a real push service (web-push-testing) and
// the in-app feed once each, and the tenant's webhook endpoint (registered
// with PUT /v1/webhooks) receives one signed delivery.completed event per
// delivery, which dev's receiver verifies, and another one send.completed
// for the notification; the same send again (same
// dedupeKey) is a duplicate and reaches none of them. A later send
// reaching all of them shows the pipeline had time to deliver the
// duplicate if it were going to.
func TestOneSendReachesEveryChannelOnceThroughHeraldDev(t *testing.T) {
	requireDev(t)
	e, _, sub := startDevWithWebPush(t, testenv.FreePort(t))
	if st, b := e.call("PUT", "/v1/webhooks/e2e", `{"url":"`+e.hooks+`/hooks/e2e","events":["delivery.completed"]}`); st != 201 {
		t.Fatalf("register the webhook endpoint: %d %s", st, b)
	}
	if st, b := e.call("PUT", "/v1/webhooks/e2e-done", `{"url":"`+e.hooks+`/hooks/e2e-done","events":["send.completed"]}`); st != 201 {
		t.Fatalf("register the send.completed endpoint: %d %s", st, b)
	}

	for id, body := range map[string]string{
		"iphone":  `{"platform":"ios","token":"0a1b2c3d4e5f"}`,
		"pixel":   `{"platform":"android","token":"fcm-pixel-token-1"}`,
		"firefox": fmt.Sprintf(`{"platform":"web","webPush":{"endpoint":%q,"p256dh":%q,"auth":%q}}`, sub.endpoint, sub.p256dh, sub.auth),
	} {
		if st, b := e.call("PUT", "/v1/users/u_e2e/devices/"+id, body); st != 200 && st != 201 {
			t.Fatalf("register %s: %d %s", id, st, b)
		}
	}
	// The route stage reads devices on its own: until a send reaches all
	// three push channels, it may not have read them yet.
	for i := 0; ; i++ {
		id := e.send(fmt.Sprintf("warm-up-%d", i), "accepted")
		if e.await(id, 30*time.Second, "apns", "fcm", "webpush") {
			break
		}
		if i == 2 {
			t.Fatalf("three sends never reached all three devices: %v", e.counts(id))
		}
	}

	first := e.send("the-one", "accepted")
	if !e.await(first, patienceE2E, "apns", "fcm", "webpush", "feed", "webhook", "completed") {
		t.Fatalf("the send did not reach every channel: %v", e.counts(first))
	}
	if again := e.send("the-one", "duplicate"); again != first {
		t.Fatalf("the repeated send has id %s, want %s", again, first)
	}
	later := e.send("a-later-one", "accepted")
	if !e.await(later, patienceE2E, "apns", "fcm", "webpush", "feed", "webhook") {
		t.Fatalf("the later send did not reach every channel: %v", e.counts(later))
	}
	// The later send's four events may still be on their way; the first's
	// are all in: one per delivery (apns, fcm, webpush, feed).
	e.await(later, patienceE2E, "webhook=4", "completed")
	if got := e.counts(first); got["apns"] != 1 || got["fcm"] != 1 || got["webpush"] != 1 || got["feed"] != 1 || got["webhook"] != 4 || got["unverified"] != 0 ||
		got["completed"] != 1 {
		t.Fatalf("the send reached %v, want each channel once, four verified webhook events and one send.completed", got)
	}

	// A daily reminder: the same dedupeKey once its window has passed is a
	// new notification with the same id (a new occurrence), and reaches
	// every channel again; the sinks' sent-sets still hold the first
	// occurrence's deliveries, which must not swallow it.
	const window = 2 * time.Second
	reminder := e.sendWithin("daily-reminder", window, "day 1", "accepted")
	if !e.await(reminder, patienceE2E, "apns", "fcm", "webpush", "feed") {
		t.Fatalf("the reminder did not reach every channel: %v", e.counts(reminder))
	}
	time.Sleep(window + 500*time.Millisecond)
	if again := e.sendWithin("daily-reminder", window, "day 2", "accepted"); again != reminder {
		t.Fatalf("the reminder sent again after its window has id %s, want %s", again, reminder)
	}
	if !e.await(reminder, patienceE2E, "apns=2", "fcm=2", "webpush=2") {
		t.Fatalf("the reminder accepted again after its window reached %v, want every push channel twice", e.counts(reminder))
	}
	// The in-app feed holds one item per notification: the second
	// occurrence replaces the first, as its collapse id does on a phone.
	deadline := time.Now().Add(patienceE2E)
	for body := ""; body != "day 2"; time.Sleep(300 * time.Millisecond) {
		_, fb := e.call("GET", "/v1/recipients/u_e2e/feed?limit=100", "")
		var page api.FeedPage
		json.Unmarshal(fb, &page)
		n := 0
		for _, it := range page.Items {
			if it.NotificationID == reminder {
				n, body = n+1, it.Body
			}
		}
		if n > 1 || time.Now().After(deadline) {
			t.Fatalf("the feed has %d items of the reminder, the last with body %q; want one, replaced by day 2", n, body)
		}
	}
}

const patienceE2E = 90 * time.Second

type e2e struct {
	t                                 *testing.T
	dev, push, apns, fcm, hooks, hash string
}

func (e *e2e) call(method, path, body string) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.dev+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+api.DevAPIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", "wait=60")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// send posts one notification to u_e2e with dedupeKey key and returns its
// id, checking the dedupe stage's status.
func (e *e2e) send(key, status string) string {
	e.t.Helper()
	st, b := e.call("POST", "/v1/notifications", fmt.Sprintf(`{"type":"e2e","recipients":["u_e2e"],"title":"Hello","body":"once","dedupeKey":%q}`, key))
	var res sdk.SendResult
	if err := json.Unmarshal(b, &res); err != nil || st/100 != 2 || len(res.Notifications) != 1 || res.Notifications[0].Status != status {
		e.t.Fatalf("send %s: %d %s, want one %s notification", key, st, b, status)
	}
	return res.Notifications[0].ID
}

// sendWithin is send with a dedupe window of its own.
func (e *e2e) sendWithin(key string, window time.Duration, body, status string) string {
	e.t.Helper()
	st, b := e.call("POST", "/v1/notifications", fmt.Sprintf(`{"type":"e2e","recipients":["u_e2e"],"title":"Hello","body":%q,"dedupeKey":%q,"dedupeWindowMs":%d}`,
		body, key, window.Milliseconds()))
	var res sdk.SendResult
	if err := json.Unmarshal(b, &res); err != nil || st/100 != 2 || len(res.Notifications) != 1 || res.Notifications[0].Status != status {
		e.t.Fatalf("send %s: %d %s, want one %s notification", key, st, b, status)
	}
	return res.Notifications[0].ID
}

// counts is how often each channel's receiver has the notification.
func (e *e2e) counts(id string) map[string]int {
	e.t.Helper()
	got := map[string]int{}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the emulator's self-signed certificate
	var apns struct {
		Pushes []struct {
			NotificationID string `json:"notificationId"`
		} `json:"pushes"`
	}
	getJSON(e.t, insecure, e.apns+"/emulator/pushes", &apns)
	for _, p := range apns.Pushes {
		if p.NotificationID == id {
			got["apns"]++
		}
	}
	var fcm struct {
		Messages []struct {
			NotificationID string `json:"notificationId"`
		} `json:"messages"`
	}
	getJSON(e.t, http.DefaultClient, e.fcm+"/emulator/messages", &fcm)
	for _, m := range fcm.Messages {
		if m.NotificationID == id {
			got["fcm"]++
		}
	}
	var web struct {
		Data struct {
			Messages []string `json:"messages"`
		} `json:"data"`
	}
	b, _ := json.Marshal(map[string]string{"clientHash": e.hash})
	resp, err := http.Post(e.push+"/get-notifications", "application/json", bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&web)
	resp.Body.Close()
	for _, m := range web.Data.Messages {
		if strings.Contains(m, `"id":"`+id+`"`) {
			got["webpush"]++
		}
	}
	var hooks struct {
		Messages []struct {
			NotificationID string `json:"notificationId"`
			Endpoint       string `json:"endpoint"`
			Verified       bool   `json:"verified"`
		} `json:"messages"`
	}
	getJSON(e.t, http.DefaultClient, e.hooks+"/emulator/messages", &hooks)
	for _, m := range hooks.Messages {
		if m.NotificationID != id {
			continue
		}
		if m.Endpoint == "e2e" {
			got["webhook"]++
		} else if m.Endpoint == "e2e-done" {
			got["completed"]++
		}
		if !m.Verified {
			got["unverified"]++
		}
	}
	_, fb := e.call("GET", "/v1/recipients/u_e2e/feed?limit=100", "")
	var page api.FeedPage
	json.Unmarshal(fb, &page)
	for _, it := range page.Items {
		if it.NotificationID == id {
			got["feed"]++
		}
	}
	return got
}

// await waits up to d until the notification reached every channel named
// (at least once, or at least n times for "channel=n").
func (e *e2e) await(id string, d time.Duration, channels ...string) bool {
	deadline := time.Now().Add(d)
	for {
		got := e.counts(id)
		all := true
		for _, ch := range channels {
			name, n, _ := strings.Cut(ch, "=")
			least, _ := strconv.Atoi(n)
			all = all && got[name] >= max(least, 1)
		}
		if all {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func getJSON(t *testing.T, cl *http.Client, url string, v any) {
	t.Helper()
	resp, err := cl.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// pushSubscription is a subscription at the test's push service, its
// endpoint on the TLS proxy herald dev trusts.
type pushSubscription struct{ endpoint, p256dh, auth string }

// startDevWithWebPush starts web-push-testing behind a TLS proxy whose
// certificate herald dev trusts (SSL_CERT_FILE: the API takes only https
// subscriptions), puts herald dev's emulators on free ports, starts herald
// dev with its ClickHouse native port on chTCP, and subscribes at the push
// service with dev's VAPID key. The returned e2e knows every receiver and
// the subscription's client hash.
func startDevWithWebPush(t *testing.T, chTCP int) (*e2e, *devProc, pushSubscription) {
	t.Helper()
	push := testenv.WebPushService(t)
	target, _ := url.Parse(push)
	tlsPush := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(target))
	t.Cleanup(tlsPush.Close)
	certFile := filepath.Join(t.TempDir(), "push.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsPush.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", certFile)
	apnsAddr, fcmAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	t.Setenv("HERALD_APNS_EMULATOR_ADDR", apnsAddr)
	t.Setenv("HERALD_FCM_EMULATOR_ADDR", fcmAddr)
	hookAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	t.Setenv("HERALD_WEBHOOK_EMULATOR_ADDR", hookAddr)
	dev := startDev(t, testenv.Herald(t), t.TempDir(), testenv.FreePort(t), testenv.FreePort(t), chTCP, testenv.FreePort(t))
	e := &e2e{t: t, dev: dev.http, push: push, apns: "https://" + apnsAddr, fcm: "http://" + fcmAddr, hooks: "http://" + hookAddr}

	sub, hash := subscribeAt(t, push, vapidKeyOf(t, dev.http))
	e.hash = hash
	endpoint, _ := url.Parse(sub.endpoint)
	endpoint.Scheme, endpoint.Host = "https", strings.TrimPrefix(tlsPush.URL, "https://")
	sub.endpoint = endpoint.String()
	return e, dev, sub
}

// subscribeAt subscribes at the push service (web-push-testing) with a
// VAPID public key and returns the subscription and its client hash.
func subscribeAt(t *testing.T, push, vapidKey string) (pushSubscription, string) {
	t.Helper()
	var sub struct {
		Data struct {
			Endpoint   string `json:"endpoint"`
			Keys       struct{ P256dh, Auth string }
			ClientHash string `json:"clientHash"`
		} `json:"data"`
	}
	postJSON(t, push+"/subscribe", map[string]string{"userVisibleOnly": "true", "applicationServerKey": vapidKey}, &sub)
	return pushSubscription{endpoint: sub.Data.Endpoint, p256dh: sub.Data.Keys.P256dh, auth: sub.Data.Keys.Auth}, sub.Data.ClientHash
}
