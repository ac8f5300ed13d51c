package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/serviceworker"
	"github.com/chromedp/chromedp"
)

// Browser is headless Chromium driven over the DevTools protocol
// (chromedp), for the web client's tests.
type Browser struct {
	// Ctx runs chromedp actions in the browser's first tab.
	Ctx    context.Context
	origin string
	regs   chan serviceworker.RegistrationID
}

// Chromium starts headless Debian Chromium (scripts/install.d/chromium)
// with a fresh profile, notifications granted to origin and the
// ServiceWorker domain enabled; it is stopped when t ends. flags are
// extra command-line switches (e.g. GCMService's). Skipped under -short;
// fails when chromium is missing.
func Chromium(t testing.TB, origin string, flags ...chromedp.ExecAllocatorOption) *Browser {
	t.Helper()
	skipShort(t, "headless Chromium")
	exe, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("testenv: headless Chromium is required (scripts/install.d/chromium): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	opts = append(opts, flags...)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)

	b := &Browser{Ctx: ctx, origin: origin, regs: make(chan serviceworker.RegistrationID, 8)}
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*serviceworker.EventWorkerRegistrationUpdated); ok {
			for _, r := range e.Registrations {
				if !r.IsDeleted && r.ScopeURL == origin+"/" {
					select {
					case b.regs <- r.RegistrationID:
					default:
					}
				}
			}
		}
	}); err != nil {
		t.Fatalf("testenv: start chromium: %v", err)
	}
	if _, err := chromedp.CallBrowser(ctx, browser.SetPermission, browser.SetPermissionParams{
		Permission: &browser.PermissionDescriptor{Name: "notifications"},
		Setting:    browser.PermissionSettingGranted,
		Origin:     origin,
	}); err != nil {
		t.Fatalf("testenv: grant notifications: %v", err)
	}
	if _, err := chromedp.Call(ctx, serviceworker.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("testenv: enable the ServiceWorker domain: %v", err)
	}
	return b
}

// Registration waits for the service-worker registration whose scope is
// the whole origin and returns its id. The minute is a guard against a
// hung browser, not a timed assertion.
func (b *Browser) Registration(t testing.TB) serviceworker.RegistrationID {
	t.Helper()
	select {
	case id := <-b.regs:
		return id
	case <-time.After(time.Minute):
		t.Fatal("testenv: no service worker registration for the origin reported by DevTools")
	}
	return ""
}

// Push delivers data to the registration's service worker as a push
// message (ServiceWorker.deliverPushMessage: what a push service's
// delivery does once the browser decrypted it).
func (b *Browser) Push(t testing.TB, reg serviceworker.RegistrationID, data string) {
	t.Helper()
	if _, err := chromedp.Call(b.Ctx, serviceworker.DeliverPushMessage, serviceworker.DeliverPushMessageParams{Origin: b.origin, RegistrationID: reg, Data: data}); err != nil {
		t.Fatalf("testenv: deliver push: %v", err)
	}
}

// Artifact writes a test artifact (a screenshot) under the artifacts
// directory, $HERALD_TEST_ARTIFACTS or test-artifacts/ at the module's root
// (git-ignored; the dashboard's browser test keeps its screenshots there
// too), logs its path and returns it. Artifacts outlive the test, for a
// person to look at.
func Artifact(t testing.TB, name string, data []byte) string {
	t.Helper()
	dir := os.Getenv("HERALD_TEST_ARTIFACTS")
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		dir = filepath.Join(root, "test-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("testenv: artifacts dir: %v", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatalf("testenv: write artifact: %v", err)
	}
	t.Logf("test artifact: %s", path)
	return path
}

// AwaitPage waits until the browser has a page (a tab or window) at url,
// e.g. one a service worker opened with clients.openWindow, and fails the
// test with the pages it has otherwise. The minute is a guard against a
// browser that never opens it, not a timed assertion.
func (b *Browser) AwaitPage(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		targets, err := chromedp.Targets(b.Ctx)
		if err != nil {
			t.Fatalf("testenv: list the browser's targets: %v", err)
		}
		var pages []string
		for _, tg := range targets {
			if tg.Type == "page" {
				if tg.URL == url {
					return
				}
				pages = append(pages, tg.URL)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: no page at %s; the browser has %q", url, pages)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
