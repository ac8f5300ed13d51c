// Package ops owns the operations endpoint every herald role serves on
// --metrics-addr: /metrics (the Prometheus registry), /livez (the process
// answers), /readyz (every readiness check of the role passes) and Go's
// profiles under /debug/pprof/ (net/http/pprof). The endpoint is for
// operators and scrapers: keep it off public networks (a CPU profile costs
// the process while it runs; the profiles show code paths, not payloads).
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/metrics"
)

// Check is one condition of readiness: Ready reports whether it holds now.
// Warnings, when set, are what is wrong without making the role unready
// (a hanging transaction on a topic it writes): /readyz lists them.
type Check struct {
	Name     string
	Ready    func() bool
	Warnings func() []string
}

// Paths are the paths Handler serves to GET (and HEAD); any other method
// there is answered by MethodNotAllowed.
var Paths = []string{"/metrics", "/livez", "/readyz"}

// Handler serves /metrics from reg, /livez, and /readyz from checks: 200
// "ok" when every check is ready, else 503 naming the ones that are not;
// either way followed by a "warning: " line per warning of a check.
func Handler(reg *metrics.Registry, checks ...Check) http.Handler {
	mux := http.NewServeMux()
	for _, p := range Paths {
		mux.HandleFunc(p, MethodNotAllowed)
	}
	mux.Handle("GET /metrics", reg.Handler())
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if not := NotReady(checks...); len(not) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", strings.Join(not, ", "))
		} else {
			fmt.Fprintln(w, "ok")
		}
		for _, c := range checks {
			if c.Warnings == nil {
				continue
			}
			for _, warning := range c.Warnings() {
				fmt.Fprintf(w, "warning: %s: %s\n", c.Name, warning)
			}
		}
	})
	mux.HandleFunc("GET /debug/pprof/", pprof.Index) // heap, goroutine, allocs, block, mutex, threadcreate
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

// MethodNotAllowed answers 405 with Allow: GET, HEAD and an RFC 9457
// problem body, as herald's API answers a wrong method (problem type
// method-not-allowed): for a path served to GET only.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	const allow = "GET, HEAD"
	h := w.Header()
	h.Set("Allow", allow)
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusMethodNotAllowed)
	json.NewEncoder(w).Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"https://herald.dev/problems/method-not-allowed", "Method not allowed", http.StatusMethodNotAllowed,
		r.Method + " is not allowed here; use " + allow})
}

// NotReady names the checks that are not ready now.
func NotReady(checks ...Check) []string {
	var not []string
	for _, c := range checks {
		if !c.Ready() {
			not = append(not, c.Name)
		}
	}
	return not
}

// Server is a running operations endpoint.
type Server struct {
	addr string
	hs   *http.Server
	errc chan error
}

// Serve listens on addr and serves h until Close.
func Serve(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ops: listen %s: %w", addr, err)
	}
	s := &Server{addr: ln.Addr().String(), errc: make(chan error, 1),
		hs: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { s.errc <- s.hs.Serve(ln) }()
	log.Info("serving /metrics, /livez, /readyz, /debug/pprof/", "addr", s.addr)
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.addr }

// Close stops the server, waiting up to 5 s for requests in flight.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.hs.Shutdown(ctx)
	if serr := <-s.errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("ops: close: %w", err)
	}
	return nil
}
