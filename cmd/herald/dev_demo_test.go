package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/testenv"
)

// TestTheDemoPageShowsOneNotificationForTwoSends is issue 13's demo end to
// end, in headless Chromium against `herald dev`, with nothing injected
// into the browser:
//
//   - The demo's Subscribe button: the page helper registers the service
//     worker and the browser's own pushManager.subscribe makes the
//     subscription with herald's VAPID key; the page registers it with
//     herald's device registry.
//   - Send twice: herald accepts the first and answers the second a
//     duplicate; its Web Push sink posts the encrypted push to the
//     subscription's endpoint, the push service hands it to the browser
//     twice (as a push service that delivers twice would), the browser
//     decrypts it and the service worker shows one notification and drops
//     the repeat; the displayed and dropped receipts reach herald (the
//     page's timeline) and the audit in herald dev's ClickHouse.
//   - A click on the notification, on the desktop (a notification server of
//     the test's own on D-Bus, where Chromium shows it): Chromium dispatches
//     a real notificationclick, the worker opens the notification's url in
//     a new window and the audit records opened.
//   - pushsubscriptionchange: the worker's subscription is dropped and the
//     event dispatched in the worker (DevTools Runtime.evaluate, a
//     script-constructed event: Chromium gives no way to fire a real one
//     that carries a new subscription, see below); the worker subscribes
//     again for real and tells herald, whose registry then holds the new
//     subscription, and a push reaches the browser through it.
//
// Chromium's push service is Google Cloud Messaging, which is not reachable
// offline (subscribe never answers: Chromium retries its check-in at
// android.clients.google.com). testenv.GCMService stands in for it on
// loopback: the check-in, the registration that issues a subscription's
// token, the MCS connection Chromium receives pushes on
// (--gcm-*-url/endpoint switches), and the push endpoint herald posts to
// (on Google's host; herald dev reaches it through an HTTPS proxy). A
// screenshot of the demo is kept as a test artifact.
func TestTheDemoPageShowsOneNotificationForTwoSends(t *testing.T) {
	requireDev(t)
	gcm := testenv.StartGCMService(t)
	gcm.DeliverEachPushTwice()
	t.Setenv("HTTPS_PROXY", gcm.ProxyURL)
	t.Setenv("SSL_CERT_FILE", gcm.CertFile)
	chTCP := testenv.FreePort(t)
	dev := startDev(t, testenv.Herald(t), t.TempDir(), testenv.FreePort(t), testenv.FreePort(t), chTCP, testenv.FreePort(t))
	e := &e2e{t: t, dev: dev.http}

	desktop := testenv.NotificationServer(t)
	b := testenv.Chromium(t, dev.http, gcm.Flags()...)
	ctx := b.Ctx
	if err := chromedp.Do(ctx, chromedp.Navigate(dev.http+"/")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click("#subscribe")); err != nil {
		t.Fatal(err)
	}
	// The minute is a guard against a subscribe that never answers, not a
	// timed assertion.
	status := eval[string](t, ctx, `new Promise((resolve) => { const end = Date.now() + 60000; const f = () => { const s = document.getElementById("sub-status").textContent; /^(Subscribed|Could not)/.test(s) || Date.now() > end ? resolve(s) : setTimeout(f, 50); }; f(); })`)
	if !strings.HasPrefix(status, "Subscribed") {
		t.Fatalf("the demo's Subscribe: %q", status)
	}
	user, device := eval[string](t, ctx, `heraldDemo.state.userId`), eval[string](t, ctx, `heraldDemo.state.deviceId`)
	sub := browserSubscription(t, ctx)
	t.Run("the Subscribe button subscribes the browser at its push service with herald's VAPID key", func(t *testing.T) {
		regs := gcm.Registrations()
		if len(regs) != 1 {
			t.Fatalf("push service registrations %+v, want one", regs)
		}
		if regs[0].Sender != vapidKeyOf(t, dev.http) {
			t.Errorf("subscribed with key %q, want herald's VAPID public key", regs[0].Sender)
		}
		if !strings.HasPrefix(regs[0].Subtype, "wp:"+dev.http+"/") {
			t.Errorf("a subscription for %q, want the demo's origin", regs[0].Subtype)
		}
		if testenv.Token(sub.Endpoint) != regs[0].Token || sub.P256dh == "" || sub.Auth == "" {
			t.Errorf("the browser's subscription %+v is not the registration's token %s with keys", sub, regs[0].Token)
		}
	})
	t.Run("herald's device registry holds the browser's subscription", func(t *testing.T) {
		if got := registeredWebPush(t, dev.http, user, device); got != sub {
			t.Fatalf("herald holds %+v, want the browser's %+v", got, sub)
		}
	})

	// The route stage reads devices on its own: send (not through the
	// page) until a push reaches the browser, so the demo's send finds it.
	gcm.AwaitConnection(t)
	warmUp(t, e, ctx, user, "warm-up")

	if err := chromedp.Do(ctx, chromedp.Click("#send-twice")); err != nil {
		t.Fatal(err)
	}
	type send struct{ DedupeKey, ID, Status string }
	sends := eval[[]send](t, ctx, `new Promise((resolve) => { const f = () => heraldDemo.state.sends.length >= 2 ? resolve(heraldDemo.state.sends) : setTimeout(f, 50); f(); })`)
	id := sends[0].ID
	t.Run("the demo sends twice: herald accepts the first and answers the second a duplicate", func(t *testing.T) {
		if len(sends) != 2 || sends[1].ID != id || sends[0].Status != "accepted" || sends[1].Status != "duplicate" {
			t.Fatalf("sends %+v", sends)
		}
	})

	outcomes := pushOutcomes(t, ctx, id, 2)
	t.Run("herald posts the notification to the push service once", func(t *testing.T) {
		// Counted by the push's Topic (its collapse id), not from a count
		// taken before: a warm-up send's push may be posted late, after
		// the warm-up gave up waiting for it and sent another.
		topic, err := identity.WebPushTopic(id)
		if err != nil {
			t.Fatal(err)
		}
		if n := gcm.PostsWithTopic(topic); n != 1 {
			// A second post is a retry of the sink's (a failed or ambiguous
			// call): its log says which.
			t.Fatalf("%d pushes posted with the notification's topic, want 1; herald dev's webpush lines:\n%s", n, logLines(t, dev.log, "webpush", 40))
		}
	})
	t.Run("the push service delivers it twice; the service worker shows it once and drops the repeat", func(t *testing.T) {
		if !slices.Equal(outcomes, []string{"duplicate", "shown"}) {
			t.Fatalf("outcomes %v, want one shown and one duplicate", outcomes)
		}
		tags := eval[[]string](t, ctx, fmt.Sprintf(`navigator.serviceWorker.ready.then((r) => r.getNotifications({tag: %q})).then((ns) => ns.map((n) => n.tag))`, id))
		if !slices.Equal(tags, []string{id}) {
			t.Fatalf("notifications shown %v, want exactly one, tagged %s", tags, id)
		}
	})

	t.Run("the receipts reach herald: the demo's timeline shows displayed and dropped apart from the push service's acceptance", func(t *testing.T) {
		kinds := eval[[]string](t, ctx, `new Promise((resolve) => { const f = () => { const tl = heraldDemo.state.timeline || []; const r = tl.filter((e) => e.kind === "receipt").map((e) => e.receipt).sort(); r.length >= 2 ? resolve(r) : (heraldDemo.refresh(), setTimeout(f, 200)); }; f(); })`)
		if !slices.Equal(kinds, []string{"displayed", "dropped"}) {
			t.Fatalf("receipts in the timeline %v", kinds)
		}
		text := eval[string](t, ctx, `document.getElementById("timeline").innerText`)
		for _, s := range []string{"accepted by the push service", "the device reports displayed", "the device reports dropped"} {
			if !strings.Contains(text, s) {
				t.Errorf("the demo's timeline lacks %q:\n%s", s, text)
			}
		}
	})
	t.Run("the receipts reach the audit in ClickHouse, once each", func(t *testing.T) {
		if got := auditedReceipts(t, chTCP, id, 2); !slices.Equal(got, []string{"displayed", "dropped"}) {
			t.Fatalf("audited receipts %v, want displayed and dropped once each", got)
		}
	})
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(90))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	testenv.Artifact(t, "herald-demo.jpg", shot)

	// A person clicks the notification: the desktop's notification server
	// tells Chromium, which dispatches a real notificationclick to the
	// worker; the worker opens the notification's url (the demo sends its
	// page with ?opened=<dedupeKey>) and reports opened.
	n := desktop.Await(t, eval[string](t, ctx, `document.getElementById("title").value || "herald"`))
	desktop.Click(t, n.ID)
	t.Run("a click on the notification opens its url in a new window", func(t *testing.T) {
		b.AwaitPage(t, dev.http+"/?opened="+url.QueryEscape(sends[0].DedupeKey))
	})
	t.Run("the click reaches the audit in ClickHouse as opened, apart from displayed", func(t *testing.T) {
		if got := auditedReceipts(t, chTCP, id, 3); !slices.Equal(got, []string{"displayed", "dropped", "opened"}) {
			t.Fatalf("audited receipts %v, want displayed, dropped and opened once each", got)
		}
	})

	// pushsubscriptionchange. Chromium fires it on its own only with no new
	// subscription (notifications permission revoked, a subscription expired
	// at start-up) and before it drops the old one, and its refresh path
	// (PushMessagingServiceImpl::OnSubscriptionInvalidation) has no
	// trigger: so the test drops the subscription and dispatches the event
	// in the worker over DevTools. That event is script-constructed, not
	// trusted: its waitUntil throws (the worker's handler has started the
	// re-registration by then, and the attached DevTools session keeps the
	// worker alive until it ends). The re-subscription that follows is the
	// browser's own, at the push service, and herald's registry is updated
	// with the device's receipt token (PUT /v1/device/webpush).
	outcome := resubscribe(t, b)
	fresh := browserSubscription(t, ctx)
	t.Run("after pushsubscriptionchange the worker subscribes again and herald's registry holds the new subscription", func(t *testing.T) {
		if outcome != "updated" {
			t.Fatalf("the worker's re-registration: %q", outcome)
		}
		if regs := gcm.Registrations(); len(regs) != 2 || testenv.Token(fresh.Endpoint) != regs[1].Token || fresh == sub {
			t.Fatalf("the browser's subscription %+v after the change; push service registrations %+v", fresh, regs)
		}
		if got := registeredWebPush(t, dev.http, user, device); got != fresh {
			t.Fatalf("herald holds %+v, want the new subscription %+v", got, fresh)
		}
	})
	t.Run("a push reaches the browser through the new subscription", func(t *testing.T) {
		warmUp(t, e, ctx, user, "after-change")
		if got := gcm.LastPostedTo(); got != testenv.Token(fresh.Endpoint) {
			t.Fatalf("herald posted to subscription %s, want the new one %s", got, testenv.Token(fresh.Endpoint))
		}
	})
}

// webPushSub is a push subscription as herald's device registry keeps it.
type webPushSub struct{ Endpoint, P256dh, Auth string }

// browserSubscription is the subscription the page's service worker holds.
func browserSubscription(t *testing.T, ctx context.Context) webPushSub {
	t.Helper()
	var s struct {
		Endpoint string
		Keys     struct{ P256dh, Auth string }
	}
	if err := json.Unmarshal([]byte(eval[string](t, ctx, `navigator.serviceWorker.ready.then((r) => r.pushManager.getSubscription()).then((s) => JSON.stringify(s))`)), &s); err != nil {
		t.Fatal(err)
	}
	return webPushSub{s.Endpoint, s.Keys.P256dh, s.Keys.Auth}
}

// registeredWebPush is the subscription herald's registry holds for a device.
func registeredWebPush(t *testing.T, dev, user, device string) webPushSub {
	t.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/users/%s/devices/%s", dev, user, device), nil)
	req.Header.Set("Authorization", "Bearer "+api.DevAPIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct {
		Platform string
		WebPush  webPushSub
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK || d.Platform != "web" {
		t.Fatalf("GET the device: %s %+v %v", resp.Status, d, err)
	}
	return d.WebPush
}

// pushOutcomes waits until the page's service worker has posted n push
// outcomes for the notification and returns them, sorted. The minute is a
// guard, not a timed assertion.
func pushOutcomes(t *testing.T, ctx context.Context, id string, n int) []string {
	t.Helper()
	return eval[[]string](t, ctx, fmt.Sprintf(`new Promise((resolve) => { const end = Date.now() + 60000; const f = () => { const o = heraldDemo.state.log.filter((m) => m.herald === "push" && m.id === %q).map((m) => m.outcome).sort(); o.length >= %d || Date.now() > end ? resolve(o) : setTimeout(f, 50); }; f(); })`, id, n))
}

// warmUp sends to the user (not through the page) until a push reaches the
// browser: the route stage reads devices on its own time.
func warmUp(t *testing.T, e *e2e, ctx context.Context, user, key string) {
	t.Helper()
	for i := 0; ; i++ {
		id := e.sendTo(user, fmt.Sprintf("%s-%d", key, i))
		if got := eval[bool](t, ctx, fmt.Sprintf(`new Promise((resolve) => { const end = Date.now() + 30000; const f = () => heraldDemo.state.log.some((m) => m.herald === "push" && m.id === %q) ? resolve(true) : Date.now() > end ? resolve(false) : setTimeout(f, 100); f(); })`, id)); got {
			return
		}
		if i == 2 {
			t.Fatalf("three sends never reached the browser")
		}
	}
}

// resubscribe drops the service worker's push subscription and dispatches
// pushsubscriptionchange in the worker (DevTools Runtime.evaluate in the
// worker's target), then returns the outcome the worker posts to the page
// ({herald: "subscription", outcome}).
func resubscribe(t *testing.T, b *testenv.Browser) string {
	t.Helper()
	targets, err := chromedp.Targets(b.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(targets, func(tg *target.Info) bool { return tg.Type == "service_worker" })
	if i < 0 {
		t.Fatal("no service worker target")
	}
	sw, cancel := chromedp.NewContext(b.Ctx, chromedp.WithTargetID(targets[i].TargetID))
	defer cancel()
	if _, err := chromedp.Run(sw, chromedp.Evaluate[bool](`self.registration.pushManager.getSubscription().then((s) => s.unsubscribe()).then((ok) => { self.dispatchEvent(new ExtendableEvent("pushsubscriptionchange")); return ok; })`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("pushsubscriptionchange in the worker: %v", err)
	}
	return eval[string](t, b.Ctx, `new Promise((resolve) => { const end = Date.now() + 60000; const f = () => { const m = heraldDemo.state.log.find((m) => m.herald === "subscription"); m || Date.now() > end ? resolve(m ? m.outcome : "none") : setTimeout(f, 50); }; f(); })`)
}

// auditedReceipts waits until the audit in herald dev's ClickHouse (native
// port chTCP) holds at least n receipts for the notification and returns
// their kinds, sorted.
func auditedReceipts(t *testing.T, chTCP int, id string, n int) []string {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{fmt.Sprintf("127.0.0.1:%d", chTCP)}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var kinds []string
	deadline := time.Now().Add(patienceE2E)
	for {
		tl, err := audit.Load(context.Background(), conn, "herald", audit.Selector{NotificationID: id})
		if err == nil {
			kinds = kinds[:0]
			for _, r := range tl.Receipts {
				kinds = append(kinds, r.Kind)
			}
			slices.Sort(kinds)
			if len(kinds) >= n {
				return kinds
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit holds receipts %v (%v), want %d", kinds, err, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// eval evaluates a JavaScript expression in the page, awaiting a promise.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %.80s: %v", expr, err)
	}
	return v
}

// sendTo sends one notification to a user through herald dev's API.
func (e *e2e) sendTo(user, key string) string {
	e.t.Helper()
	st, b := e.call("POST", "/v1/notifications", fmt.Sprintf(`{"type":"demo.warmup","recipients":[%q],"title":"warm-up","body":"b","dedupeKey":%q}`, user, key))
	if st != http.StatusAccepted {
		e.t.Fatalf("send: %d %s", st, b)
	}
	var res struct {
		Notifications []struct{ ID string } `json:"notifications"`
	}
	if err := json.Unmarshal(b, &res); err != nil || len(res.Notifications) != 1 {
		e.t.Fatalf("send answer %s: %v", b, err)
	}
	return res.Notifications[0].ID
}

// logLines returns the last n lines of the log file at path that contain
// word.
func logLines(t *testing.T, path, word string, n int) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, word) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
