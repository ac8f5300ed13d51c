package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/testenv"
)

// TestTheDemoPagesSubscribeButtonSubscribesThisBrowser presses the demo's
// Subscribe button in headless Chromium against `herald dev`, with nothing
// injected: the page helper registers the service worker, asks herald for
// its VAPID key, and the browser's own pushManager.subscribe makes the
// subscription (its keys and endpoint); the page registers it with herald.
//
// Headless Chromium subscribes through its push service, Google Cloud
// Messaging: a check-in at android.clients.google.com, then a registration
// that issues the subscription's token. Offline, subscribe never answers
// (Chromium retries the check-in with backoff), so the test points
// Chromium's --gcm-checkin-url and --gcm-registration-url at a local GCM
// registration service (testenv.GCMService). Everything on the browser's
// side is Chromium's own. What this cannot show is delivery to that
// subscription: Chromium receives pushes over GCM's MCS connection, and
// the endpoint it builds is on Google's host (jmt17.google.com), so the
// demo test delivers through web-push-testing instead.
func TestTheDemoPagesSubscribeButtonSubscribesThisBrowser(t *testing.T) {
	requireDev(t)
	gcm := testenv.StartGCMService(t)
	dev := startDev(t, testenv.Herald(t), t.TempDir(), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t))
	b := testenv.Chromium(t, dev.http, gcm.Flags()...)
	ctx := b.Ctx
	if err := chromedp.Do(ctx, chromedp.Navigate(dev.http+"/")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click("#subscribe")); err != nil {
		t.Fatal(err)
	}
	// The minute is a guard against a subscribe that never answers (what
	// Chromium does offline without the GCM service), not a timed assertion.
	status := eval[string](t, ctx, `new Promise((resolve) => { const end = Date.now() + 60000; const f = () => { const s = document.getElementById("sub-status").textContent; /^(Subscribed|Could not)/.test(s) || Date.now() > end ? resolve(s) : setTimeout(f, 50); }; f(); })`)
	if !strings.HasPrefix(status, "Subscribed") {
		t.Fatalf("the demo says %q", status)
	}
	type webPush struct{ Endpoint, P256dh, Auth string }
	var browser struct {
		Endpoint string
		Keys     struct{ P256dh, Auth string }
	}
	if err := json.Unmarshal([]byte(eval[string](t, ctx, `navigator.serviceWorker.ready.then((r) => r.pushManager.getSubscription()).then((s) => JSON.stringify(s))`)), &browser); err != nil {
		t.Fatal(err)
	}
	user, device := eval[string](t, ctx, `heraldDemo.state.userId`), eval[string](t, ctx, `heraldDemo.state.deviceId`)

	t.Run("the browser subscribed with herald's VAPID key at its push service", func(t *testing.T) {
		regs := gcm.Registrations()
		if len(regs) != 1 {
			t.Fatalf("push service registrations %+v, want one", regs)
		}
		if regs[0].Sender != vapidKeyOf(t, dev.http) {
			t.Errorf("subscribed with key %q, want herald's VAPID public key", regs[0].Sender)
		}
		if !strings.HasPrefix(regs[0].Subtype, "wp:"+dev.http+"/") {
			t.Errorf("subscription for %q, want the demo's origin", regs[0].Subtype)
		}
		if testenv.Token(browser.Endpoint) != regs[0].Token || browser.Keys.P256dh == "" || browser.Keys.Auth == "" {
			t.Errorf("the browser's subscription %+v is not the registration's token %s with keys", browser, regs[0].Token)
		}
	})
	t.Run("herald's device registry holds the browser's subscription", func(t *testing.T) {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/users/%s/devices/%s", dev.http, user, device), nil)
		req.Header.Set("Authorization", "Bearer "+api.DevAPIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d struct {
			Platform string
			WebPush  webPush
		}
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET the device: %s %v", resp.Status, err)
		}
		if want := (webPush{browser.Endpoint, browser.Keys.P256dh, browser.Keys.Auth}); d.Platform != "web" || d.WebPush != want {
			t.Fatalf("herald holds %+v, want the browser's %+v", d, want)
		}
	})
}
