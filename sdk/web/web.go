// Package web owns herald's web client: the TypeScript sources in src/
// (a service worker that shows each herald notification at most once per
// browser and reports receipts — displayed, opened, dropped — with the
// device's receipt token, and a page-side helper that subscribes the
// browser with herald's VAPID key and registers it as a device, keeping
// the token in IndexedDB for the worker), their unit tests in test/, and
// the built JavaScript in dist/, which is committed and embedded here so
// herald serves it and a user needs no Node at run time.
//
// Rebuild dist/ after changing src/ with `npm run build` in sdk/web (the
// toolchain is pinned in package.json and installed by
// scripts/install.d/sdk-web); TestSources fails while dist/
// is stale.
package web

import (
	"embed"
	"net/http"
	"strings"
)

//go:embed dist/herald-sw.js dist/herald.js
var dist embed.FS

// demoPage is the demo (demo/index.html): plain HTML and a module script
// that imports the page helper, so it needs no build.
//
//go:embed demo/index.html
var demoPage []byte

// Files served under Prefix: the service worker and the page helper (an ES
// module).
const (
	Prefix        = "/sdk/"
	ServiceWorker = "herald-sw.js"
	PageHelper    = "herald.js"
)

// Handler serves GET /sdk/herald-sw.js and GET /sdk/herald.js. The service
// worker is served with Service-Worker-Allowed: / so a page may register it
// with scope "/" although it lives under /sdk/.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		if r.Method != http.MethodGet && r.Method != http.MethodHead || (name != ServiceWorker && name != PageHelper) {
			http.NotFound(w, r)
			return
		}
		b, err := dist.ReadFile("dist/" + name)
		if err != nil {
			http.Error(w, "web: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		if name == ServiceWorker {
			w.Header().Set("Service-Worker-Allowed", "/")
		}
		w.Write(b)
	})
}

// Demo serves the demo page at GET /: subscribe this browser, send a test
// notification, send it twice and see one, with the notification's
// timeline beside it. It sends with an API key typed into the page (the
// development key by default), so serve it only where that is acceptable:
// herald dev always, herald api with --demo.
func Demo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(demoPage)
	})
}
