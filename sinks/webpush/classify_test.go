package webpush_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/webpush/emulator"
)

func startEmulator(t *testing.T) *emulator.Emulator {
	t.Helper()
	em, err := emulator.Start(emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	return em
}

// TestEachWebPushAnswerIsClassifiedAsThePackageTableSays sends through the
// faulting push service emulator: every row of the package's table.
func TestEachWebPushAnswerIsClassifiedAsThePackageTableSays(t *testing.T) {
	em := startEmulator(t)
	p, _ := newProvider(t)
	cases := []struct {
		name    string
		rule    emulator.Rule
		unknown bool   // a subscription the service does not know
		body    string // "" : a short one
		class   sinks.Class
		rule_   string
		status  int
		retire  bool
		after   time.Duration
		timeout time.Duration
	}{
		{name: "201 is a success", class: sinks.Success, rule_: "accepted", status: 201},
		{name: "an unknown subscription (404) is permanent and retires the device", unknown: true, class: sinks.Permanent, rule_: "expired_subscription", status: 404, retire: true},
		{name: "410 Gone is permanent and retires the device", rule: emulator.Rule{Status: 410}, class: sinks.Permanent, rule_: "expired_subscription", status: 410, retire: true},
		{name: "413 is permanent and keeps the device", rule: emulator.Rule{Status: 413}, class: sinks.Permanent, rule_: "payload_too_large", status: 413},
		{name: "a payload too large for one record is permanent and keeps the device, unsent", body: strings.Repeat("x", 5000), class: sinks.Permanent, rule_: "payload_too_large"},
		{name: "429 is retryable with its Retry-After", rule: emulator.Rule{Status: 429, RetryAfter: 9 * time.Second}, class: sinks.Retryable, rule_: "too_many_requests", status: 429, after: 9 * time.Second},
		{name: "503 is retryable with its Retry-After", rule: emulator.Rule{Status: 503, RetryAfter: 2 * time.Second}, class: sinks.Retryable, rule_: "server_error", status: 503, after: 2 * time.Second},
		{name: "500 is retryable", rule: emulator.Rule{Status: 500}, class: sinks.Retryable, rule_: "server_error", status: 500},
		{name: "400 is permanent", rule: emulator.Rule{Status: 400}, class: sinks.Permanent, rule_: "bad_request", status: 400},
		{name: "403 (VAPID rejected) is permanent for the configuration", rule: emulator.Rule{Status: 403}, class: sinks.Permanent, rule_: "auth", status: 403},
		{name: "another 4xx is permanent", rule: emulator.Rule{Status: 409}, class: sinks.Permanent, rule_: "http_4xx", status: 409},
		{name: "a reset after the request was read is ambiguous", rule: emulator.Rule{Reset: true}, class: sinks.Ambiguous, rule_: "no_answer"},
		{name: "an answer slower than the call's deadline is ambiguous", rule: emulator.Rule{Delay: time.Hour}, class: sinks.Ambiguous, rule_: "no_answer", timeout: 300 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := em.Subscribe("")
			if err != nil {
				t.Fatal(err)
			}
			id := sub.Endpoint[strings.LastIndex(sub.Endpoint, "/")+1:]
			if tc.unknown {
				sub.Endpoint += "-unknown"
			}
			if tc.rule != (emulator.Rule{}) {
				r := tc.rule
				r.Token, r.Times = id, 1
				em.AddRule(r)
			}
			cmd := command(sub)
			if tc.body != "" {
				cmd.Body = tc.body
			}
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 2 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			res := p.Send(ctx, cmd)
			if res.Class != tc.class || res.Rule != tc.rule_ || res.Status != tc.status || res.RetireDevice != tc.retire || res.RetryAfter != tc.after {
				t.Fatalf("got %v/%s status %d retire=%v after=%v (err %v), want %v/%s status %d retire=%v after=%v",
					res.Class, res.Rule, res.Status, res.RetireDevice, res.RetryAfter, res.Err, tc.class, tc.rule_, tc.status, tc.retire, tc.after)
			}
		})
	}
	t.Run("every push carried the notification's Topic, a TTL and aes128gcm", func(t *testing.T) {
		topic, _ := identity.WebPushTopic(nid)
		for _, push := range em.Received() {
			if push.Topic != topic || push.TTL == "" || push.Encoding != "aes128gcm" || push.Urgency != "high" {
				t.Errorf("push %+v", push)
			}
		}
	})
}
