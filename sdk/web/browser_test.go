package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/serviceworker"
	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/internal/testenv"
)

// testPage registers herald's service worker with scope "/", registers the
// browser as a device with the page helper (a subscription of its own and
// a registerDevice that answers the receipt token testToken, so the worker
// sends receipts to this server), and collects the outcomes the worker
// posts ({herald: "push", id, outcome}) in window.outcomes.
const testPage = `<!doctype html><title>herald sw test</title><script type="module">
import { registerWith, DeviceStore } from "/sdk/herald.js";
window.outcomes = [];
navigator.serviceWorker.addEventListener("message", (e) => { if (e.data && e.data.herald === "push") window.outcomes.push(e.data); });
window.ready = navigator.serviceWorker.register("/sdk/herald-sw.js", {scope: "/"}).then(() => navigator.serviceWorker.ready)
  .then(() => registerWith({endpoint: "https://push.test/s/1", keys: {p256dh: "BNc", auth: "tBH"}},
    {userId: "u1", deviceId: "chromium", base: location.origin, store: new DeviceStore(), fetch: fetch.bind(globalThis),
     registerDevice: async () => ({receiptToken: "` + testToken + `"})}))
  .then(() => true);
</script>`

const testToken = "hrt1.test-token"

// receiptLog records the receipts the worker posts to POST /v1/receipts,
// as "kind id", and answers the first one 503 so the worker retries it.
type receiptLog struct {
	mu    sync.Mutex
	calls int
	got   []string
	auth  []string
}

func (l *receiptLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct{ NotificationID, Kind, Type string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	l.auth = append(l.auth, r.Header.Get("Authorization"))
	if l.calls == 1 {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	l.got = append(l.got, body.Kind+" "+body.NotificationID)
	w.WriteHeader(http.StatusAccepted)
}

// await waits until the log holds the receipt (a "kind id"), for a receipt
// the worker sends on its own time (after a click). The minute is a guard
// against a worker that never sends it, not a timed assertion.
func (l *receiptLog) await(t *testing.T, receipt string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		l.mu.Lock()
		got := slices.Clone(l.got)
		l.mu.Unlock()
		if slices.Contains(got, receipt) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no receipt %q; the worker sent %v", receipt, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// take returns the receipts recorded since the last take, sorted.
func (l *receiptLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.got
	l.got = nil
	slices.Sort(got)
	return got
}

// chromium starts headless Chromium on a page of srv that has registered
// the service worker, and returns the browser and the worker's
// registration id.
func chromium(t *testing.T, srv *httptest.Server) (*testenv.Browser, serviceworker.RegistrationID) {
	t.Helper()
	b := testenv.Chromium(t, srv.URL)
	if err := chromedp.Do(b.Ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(b.Ctx, chromedp.Evaluate[bool](`window.ready`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("register the service worker: %v", err)
	}
	return b, b.Registration(t)
}

// push delivers each of data to the service worker as a push message, all
// before waiting, then waits for the worker to post an outcome for each; it
// returns the outcomes, sorted.
func push(t *testing.T, b *testenv.Browser, reg serviceworker.RegistrationID, data ...string) []string {
	t.Helper()
	before, err := chromedp.Run(b.Ctx, chromedp.Evaluate[int](`window.outcomes.length`))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range data {
		b.Push(t, reg, d)
	}
	n := before + len(data)
	wait := fmt.Sprintf(`new Promise((resolve) => { const f = () => window.outcomes.length >= %d ? resolve(window.outcomes.slice(%d, %d).map((o) => o.outcome).sort()) : setTimeout(f, 20); f(); })`, n, before, n)
	outcomes, err := chromedp.Run(b.Ctx, chromedp.Evaluate[[]string](wait, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("wait for the pushes' outcomes: %v", err)
	}
	return outcomes
}

// shown returns the tags of the notifications the registration shows.
func shown(t *testing.T, ctx context.Context) []string {
	t.Helper()
	tags, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`navigator.serviceWorker.ready.then((r) => r.getNotifications()).then((ns) => ns.map((n) => n.tag).sort())`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	return tags
}

func payload(id string) string {
	return payloadWithURL(id, "")
}

// payloadWithURL is a push's payload whose notification opens url when
// clicked.
func payloadWithURL(id, url string) string {
	p := map[string]string{"id": id, "title": "herald test " + id, "body": "b"}
	if url != "" {
		p["url"] = url
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// TestBrowser drives headless Chromium over the DevTools protocol: pushes
// are delivered to the real service worker (ServiceWorker.deliverPushMessage),
// each push's outcome (shown or duplicate) is what the worker posts to the
// page, and the notifications are read with registration.getNotifications().
// The outcomes are what fail without the seen-set: the notifications alone
// would not, since a repeat with the same tag replaces rather than stacks.
// Chromium shows the notifications on a desktop notification server of the
// test's own (D-Bus), which clicks one as a person would: Chromium then
// dispatches a real notificationclick to the worker.
func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("headless Chromium: not under -short")
	}
	receipts := &receiptLog{}
	mux := http.NewServeMux()
	mux.Handle("GET "+Prefix, Handler())
	mux.Handle("POST /v1/receipts", receipts)
	mux.HandleFunc("GET /landing", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>landing</title>`)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, testPage)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	desktop := testenv.NotificationServer(t)
	b, reg := chromium(t, srv)
	ctx := b.Ctx

	for _, c := range []struct {
		name     string
		restart  bool
		pushes   []string
		outcomes []string
		shown    []string
		receipts []string
	}{
		{"a first push shows a notification tagged with its id and reports it displayed (after a retry)", false,
			[]string{payload("a")}, []string{"shown"}, []string{"a"}, []string{"displayed a"}},
		{"the same payload delivered again shows no second notification and reports it dropped", false,
			[]string{payload("a")}, []string{"duplicate"}, []string{"a"}, []string{"dropped a"}},
		{"two ids show two notifications", false,
			[]string{payload("b")}, []string{"shown"}, []string{"a", "b"}, []string{"displayed b"}},
		{"two pushes of one id arriving together show one notification", false,
			[]string{payload("c"), payload("c")}, []string{"duplicate", "shown"}, []string{"a", "b", "c"}, []string{"displayed c", "dropped c"}},
		{"after the service worker is stopped and started again a repeat is still dropped, and reported", true,
			[]string{payload("a")}, []string{"duplicate"}, []string{"a", "b", "c"}, []string{"dropped a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.restart {
				if _, err := chromedp.Call(ctx, serviceworker.StopAllWorkers, cdp.Empty{}); err != nil {
					t.Fatal(err)
				}
			}
			if got := push(t, b, reg, c.pushes...); !slices.Equal(got, c.outcomes) {
				t.Errorf("outcomes %v, want %v", got, c.outcomes)
			}
			if got := shown(t, ctx); !slices.Equal(got, c.shown) {
				t.Errorf("notifications %v, want %v", got, c.shown)
			}
			// The worker reports before it posts the push's outcome.
			if got := receipts.take(); !slices.Equal(got, c.receipts) {
				t.Errorf("receipts %v, want %v", got, c.receipts)
			}
		})
	}
	t.Run("a click on the notification opens its url in a new window and reports opened", func(t *testing.T) {
		url := srv.URL + "/landing?n=d"
		if got := push(t, b, reg, payloadWithURL("d", url)); !slices.Equal(got, []string{"shown"}) {
			t.Fatalf("outcomes %v, want shown", got)
		}
		if got := receipts.take(); !slices.Equal(got, []string{"displayed d"}) {
			t.Fatalf("receipts %v, want displayed d", got)
		}
		n := desktop.Await(t, "herald test d")
		desktop.Click(t, n.ID)
		b.AwaitPage(t, url)
		receipts.await(t, "opened d")
		if got := receipts.take(); !slices.Equal(got, []string{"opened d"}) {
			t.Errorf("receipts %v, want opened d once", got)
		}
		if got := shown(t, ctx); slices.Contains(got, "d") {
			t.Errorf("notifications %v: the clicked one is still shown", got)
		}
	})
	t.Run("every receipt carries the device's receipt token", func(t *testing.T) {
		receipts.mu.Lock()
		defer receipts.mu.Unlock()
		if receipts.calls < 7 {
			t.Fatalf("%d receipt calls, want the 6 receipts and a retry", receipts.calls)
		}
		for _, a := range receipts.auth {
			if a != "Bearer "+testToken {
				t.Fatalf("Authorization %q", a)
			}
		}
	})
}
