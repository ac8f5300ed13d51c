// Package web owns herald's web client: the TypeScript sources in src/
// (a service worker that shows each herald notification at most once per
// browser, and a page-side helper that subscribes the browser), their unit
// tests in test/, and the built JavaScript in dist/, which is committed and
// embedded here so herald serves it and a user needs no Node at run time.
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
