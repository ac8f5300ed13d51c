package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/analytics/audit"
	"github.com/heraldhq/herald/internal/testenv"
)

// TestTheDemoPageShowsOneNotificationForTwoSends is issue 13's demo end to
// end, in headless Chromium against `herald dev`: the demo page at /
// registers the browser (the page helper, with a subscription of the
// web-push-testing push service, since headless Chromium has no push
// service of its own) and sends one notification twice; herald accepts the
// first and answers the second a duplicate. Every push the push service
// receives is handed to the browser's service worker twice, as a push
// service that delivers twice would (DevTools'
// ServiceWorker.deliverPushMessage, with the payload web-push-testing
// decrypted). The browser shows exactly one notification; its displayed
// and dropped receipts reach herald (the page's timeline, from GET
// /v1/notifications/{id}) and the audit in herald dev's ClickHouse. Then
// the notification is clicked on the desktop (a notification server of the
// test's own on D-Bus, where Chromium shows it), so Chromium dispatches a
// real notificationclick: the worker opens the notification's url in a new
// window and the audit records opened. A screenshot of the demo is kept as
// a test artifact.
func TestTheDemoPageShowsOneNotificationForTwoSends(t *testing.T) {
	requireDev(t)
	chTCP := testenv.FreePort(t)
	e, dev, sub := startDevWithWebPush(t, chTCP)

	desktop := testenv.NotificationServer(t)
	b := testenv.Chromium(t, dev.http)
	ctx := b.Ctx
	if err := chromedp.Do(ctx, chromedp.Navigate(dev.http+"/")); err != nil {
		t.Fatal(err)
	}
	subJSON, _ := json.Marshal(map[string]any{"endpoint": sub.endpoint, "keys": map[string]string{"p256dh": sub.p256dh, "auth": sub.auth}})
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]any](`heraldDemo.subscribe(`+string(subJSON)+`)`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("the demo's subscribe: %v", err)
	}
	reg := b.Registration(t)
	user := eval[string](t, ctx, `heraldDemo.state.userId`)

	// The route stage reads devices on its own: send (not through the
	// page) until a push reaches the push service, so the demo's send finds
	// the browser. These warm-up pushes are not given to the browser.
	for i := 0; ; i++ {
		id := e.sendTo(user, fmt.Sprintf("warm-up-%d", i))
		if e.awaitPush(id, 30*time.Second) {
			break
		}
		if i == 2 {
			t.Fatalf("three sends never reached the browser's subscription (it holds %q)", e.pushes())
		}
	}
	before := len(e.pushes())

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

	// The push service: every push it received since the warm-up, handed to
	// the browser twice.
	if !e.awaitPush(id, patienceE2E) {
		t.Fatalf("the push service never received notification %s (it holds %q)", id, e.pushes())
	}
	delivered := e.pushes()[before:]
	t.Run("the push service received the notification once", func(t *testing.T) {
		if n := len(slices.DeleteFunc(slices.Clone(delivered), func(m string) bool { return !strings.Contains(m, `"id":"`+id+`"`) })); n != 1 {
			t.Fatalf("%d pushes of %s, want 1: %q", n, id, delivered)
		}
	})
	for _, m := range delivered {
		b.Push(t, reg, m)
		b.Push(t, reg, m)
	}
	outcomes := eval[[]string](t, ctx, fmt.Sprintf(`new Promise((resolve) => { const f = () => { const o = heraldDemo.state.log.filter((m) => m.herald === "push" && m.id === %q).map((m) => m.outcome).sort(); o.length >= 2 ? resolve(o) : setTimeout(f, 50); }; f(); })`, id))
	t.Run("the service worker shows the notification once and drops the repeat", func(t *testing.T) {
		if !slices.Equal(outcomes, []string{"duplicate", "shown"}) {
			t.Fatalf("outcomes %v, want one shown and one duplicate", outcomes)
		}
		tags := eval[[]string](t, ctx, `navigator.serviceWorker.ready.then((r) => r.getNotifications()).then((ns) => ns.map((n) => n.tag))`)
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

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(90))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	testenv.Artifact(t, "herald-demo.jpg", shot)
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

// pushes returns the payloads the push service holds for the subscription,
// decrypted, in arrival order.
func (e *e2e) pushes() []string {
	e.t.Helper()
	var msgs struct {
		Data struct {
			Messages []string `json:"messages"`
		} `json:"data"`
	}
	postJSON(e.t, e.push+"/get-notifications", map[string]string{"clientHash": e.hash}, &msgs)
	return msgs.Data.Messages
}

// awaitPush waits up to d until the push service holds a push of the
// notification.
func (e *e2e) awaitPush(id string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if slices.ContainsFunc(e.pushes(), func(m string) bool { return strings.Contains(m, `"id":"`+id+`"`) }) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(300 * time.Millisecond)
	}
}
