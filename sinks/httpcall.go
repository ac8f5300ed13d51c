package sinks

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"
)

// What every HTTP adapter shares: whether a failed call may have reached
// the provider, and the provider's Retry-After.

// TraceWrite returns a context that marks, in the returned flag, the moment
// the request's headers were written to the connection (httptrace
// WroteHeaders): from then on the provider may have the request.
func TraceWrite(ctx context.Context) (context.Context, *atomic.Bool) {
	var wrote atomic.Bool
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }}), &wrote
}

// NoAnswer classifies a call that got no HTTP answer: ambiguous
// (no_answer) once the request was written, else retryable (not_sent):
// connection refused, TLS, a timeout before the headers were written.
func NoAnswer(err error, wrote bool) Result {
	if wrote {
		return Result{Class: Ambiguous, Rule: "no_answer", Err: err}
	}
	return Result{Class: Retryable, Rule: "not_sent", Err: err}
}

// ParseRetryAfter reads a Retry-After header: delay seconds or an HTTP date
// (0 when absent, malformed or past).
func ParseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		return max(0, time.Duration(s)*time.Second)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now))
	}
	return 0
}
