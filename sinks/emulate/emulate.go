// Package emulate owns what every local provider emulator of herald shares
// (sinks/apns/emulator, sinks/fcm/emulator, sinks/webhook/emulator,
// sinks/webpush/emulator): answers scripted per token, faults injected at
// random into the answers no rule scripts (a reset after the request was
// read, an answer slower than the client's deadline), the record of the
// requests read and its JSON listing, and the listener and HTTP server. Each emulator keeps its
// provider's wire format and request checks; this is only the mechanism.
package emulate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Rule scripts the answer to requests for one token ("" for every token).
type Rule struct {
	Token  string
	Status int
	// Reason is the provider's reason or error code in the answer.
	Reason     string
	RetryAfter time.Duration
	// Times the rule applies, then it is dropped (0: forever).
	Times int
	// Delay answers after this long (a slow answer); Reset resets the
	// stream after the request was read, with no answer.
	Delay time.Duration
	Reset bool
}

// Faults are injected at random into answers no rule scripts.
type Faults struct {
	// ResetRate is the share of requests answered by a stream reset;
	// SlowRate the share answered after SlowDelay.
	ResetRate, SlowRate float64
	SlowDelay           time.Duration
}

// Script holds the rules and faults of one emulator.
type Script struct {
	mu     sync.Mutex
	rules  []*Rule
	faults Faults
}

// AddRule scripts answers; rules are matched in the order added.
func (s *Script) AddRule(r Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, &r)
}

// SetFaults sets the random faults.
func (s *Script) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Answer returns what to do with a request for token that passed the
// provider's own checks: the first matching rule (used up after Times), or
// a random fault, or the zero Rule (answer normally). scripted tells a
// rule matched.
func (s *Script) Answer(token string) (r Rule, scripted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, rule := range s.rules {
		if rule.Token != "" && rule.Token != token {
			continue
		}
		if rule.Times > 0 {
			if rule.Times--; rule.Times == 0 {
				s.rules = append(s.rules[:i:i], s.rules[i+1:]...)
			}
		}
		return *rule, true
	}
	switch x := mrand.Float64(); {
	case x < s.faults.ResetRate:
		return Rule{Reset: true}, false
	case x < s.faults.ResetRate+s.faults.SlowRate:
		return Rule{Delay: s.faults.SlowDelay}, false
	}
	return Rule{}, false
}

// Label is how a record names the answer: "reset", "slow", or the status
// and reason.
func (r Rule) Label(status int, reason string) string {
	switch {
	case r.Reset:
		return "reset"
	case r.Delay > 0:
		return "slow"
	case reason == "":
		return itoa(status)
	}
	return itoa(status) + " " + reason
}

// Hold carries out the rule's fault on a request already read: a reset
// aborts the handler (the client sees its stream or connection reset and
// no answer), a delay plus latency waits. It returns false when the
// client went away while waiting (no answer is written then).
func Hold(r *http.Request, rule Rule, latency time.Duration) bool {
	if rule.Reset {
		panic(http.ErrAbortHandler)
	}
	if wait := latency + rule.Delay; wait > 0 {
		return sleep(r.Context(), wait)
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Log is the record of the requests an emulator read, oldest first,
// keeping the last max (0: all of them).
type Log[T any] struct {
	mu    sync.Mutex
	max   int
	items []T
	total int
}

// NewLog returns a record keeping the last max items (0: all).
func NewLog[T any](max int) *Log[T] { return &Log[T]{max: max} }

// Add records one request.
func (l *Log[T]) Add(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	l.items = append(l.items, v)
	if l.max > 0 && len(l.items) > l.max {
		l.items = append(l.items[:0:0], l.items[len(l.items)-l.max:]...)
	}
}

// Items returns a copy of the kept records, oldest first.
func (l *Log[T]) Items() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.items...)
}

// Total is the number of requests recorded since the start.
func (l *Log[T]) Total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Handler serves the record as JSON: {"total": Total(), field: Items()}
// (an emulator's GET /emulator/messages or /emulator/pushes).
func (l *Log[T]) Handler(field string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		total := l.Total()
		items, err := json.Marshal(l.Items())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		key, _ := json.Marshal(field)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"total\":%d,%s:%s}\n", total, key, items)
	}
}

// Listen listens on addr (127.0.0.1:0 when empty) for the emulator named
// what ("fcm emulator"), which its error names.
func Listen(what, addr string) (net.Listener, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", what, addr, err)
	}
	return ln, nil
}

// NewServer is an emulator's HTTP server for h: the server's own errors
// (a malformed request, a failed TLS handshake) go to log at debug level.
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
}

func itoa(n int) string { return strconv.Itoa(n) }
