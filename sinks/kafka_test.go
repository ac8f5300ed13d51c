package sinks_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns"
	"github.com/heraldhq/herald/sinks/apns/emulator"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/topics"
)

// deliveryCmd is the command the route stage writes for one device.
func deliveryCmd(notification, device string) *schemas.DeliveryCommand {
	nid := identity.DedupeID("acme", "t", "u1", notification)
	return &schemas.DeliveryCommand{
		DeliveryID: identity.DeliveryID(nid, device), NotificationID: nid, Tenant: "acme", Type: "t", Recipient: "u1",
		DeviceID: device, Channel: "apns", Token: "tok-" + device, CollapseID: nid, APNsID: identity.APNsID(nid),
		Title: notification, Body: "b", CreatedAt: time.Now().UnixMilli(), ExpiresAt: time.Now().Add(time.Hour).UnixMilli(),
	}
}

// produceAll writes the commands in order, keyed by delivery id.
func produceAll(cl *kgo.Client, cat *topics.Catalog, cmds []*schemas.DeliveryCommand) error {
	var mu sync.Mutex
	var first error
	for _, c := range cmds {
		b, err := schemas.Encode(c)
		if err != nil {
			return err
		}
		rec := &kgo.Record{Topic: cat.Name(topics.Deliveries("apns")), Key: []byte(c.DeliveryID), Value: b}
		cl.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		return err
	}
	return first
}

// startSink runs one APNs sink instance sending to em until the test ends.
func startSink(t *testing.T, brokers []string, cat *topics.Catalog, em *emulator.Emulator, p sinks.Policy) {
	t.Helper()
	prov, err := apns.New(apns.Config{Host: em.URL(), RootCAs: em.RootCAs(), Topic: "com.example.app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prov.CloseIdleConnections)
	sinktest.Start(t, sinks.Options{Instance: stage.Instance{Brokers: brokers}, Channel: "apns", Provider: prov, Catalog: cat, Policy: p, CallTimeout: time.Second})
}

func TestEachClassificationDoesWhatTheTableSaysOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	em, err := emulator.Start(emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })

	type want struct {
		outcome string
		results string // attempts' results in order
		pushes  int    // requests the emulator read
		dead    bool
		retired bool
	}
	cases := []struct {
		name  string
		rules []emulator.Rule
		cmd   func(c *schemas.DeliveryCommand)
		want  want
	}{
		{"a 200 is delivered with one call", nil, nil, want{schemas.OutcomeDelivered, "sent", 1, false, false}},
		{"410 Unregistered retires the device", []emulator.Rule{{Status: 410, Reason: "Unregistered"}}, nil,
			want{schemas.OutcomeDeviceRetired, "permanent", 1, false, true}},
		{"400 BadDeviceToken retires the device", []emulator.Rule{{Status: 400, Reason: "BadDeviceToken"}}, nil,
			want{schemas.OutcomeDeviceRetired, "permanent", 1, false, true}},
		{"413 PayloadTooLarge fails and is dead-lettered", []emulator.Rule{{Status: 413, Reason: "PayloadTooLarge"}}, nil,
			want{schemas.OutcomeFailed, "permanent", 1, true, false}},
		{"403 ExpiredProviderToken fails and is dead-lettered", []emulator.Rule{{Status: 403, Reason: "ExpiredProviderToken"}}, nil,
			want{schemas.OutcomeFailed, "permanent", 1, true, false}},
		{"429 is retried after its Retry-After", []emulator.Rule{{Status: 429, Reason: "TooManyRequests", RetryAfter: time.Second, Times: 1}}, nil,
			want{schemas.OutcomeDelivered, "retryable,sent", 2, false, false}},
		{"500 and 503 are retried", []emulator.Rule{{Status: 500, Reason: "InternalServerError", Times: 1}, {Status: 503, Reason: "ServiceUnavailable", Times: 1}}, nil,
			want{schemas.OutcomeDelivered, "retryable,retryable,sent", 3, false, false}},
		{"a reset after the request was read is ambiguous and retried", []emulator.Rule{{Reset: true, Times: 1}}, nil,
			want{schemas.OutcomeDelivered, "ambiguous,sent", 2, false, false}},
		{"a slow answer past the call timeout is ambiguous and retried", []emulator.Rule{{Delay: time.Minute, Times: 1}}, nil,
			want{schemas.OutcomeDelivered, "ambiguous,sent", 2, false, false}},
		{"retries stop at the attempt bound: failed and dead-lettered", []emulator.Rule{{Status: 500, Reason: "InternalServerError"}}, nil,
			want{schemas.OutcomeFailed, "retryable,retryable,retryable", 3, true, false}},
		// The expiry leaves ample time for the first attempt on a loaded
		// machine (3 s did not, once), and the retry it asks for is later.
		{"retries stop at the expiry: expired", []emulator.Rule{{Status: 503, Reason: "ServiceUnavailable", RetryAfter: 10 * time.Minute}},
			func(c *schemas.DeliveryCommand) { c.ExpiresAt = time.Now().Add(time.Minute).UnixMilli() },
			want{schemas.OutcomeExpired, "retryable", 1, false, false}},
		{"an expired command is not sent", nil,
			func(c *schemas.DeliveryCommand) { c.ExpiresAt = time.Now().Add(-time.Second).UnixMilli() },
			want{schemas.OutcomeExpired, "", 0, false, false}},
	}
	var cmds []*schemas.DeliveryCommand
	for i, tc := range cases {
		c := deliveryCmd(fmt.Sprintf("n%d", i), fmt.Sprintf("dev%d", i))
		if tc.cmd != nil {
			tc.cmd(c)
		}
		for _, r := range tc.rules {
			r.Token = c.Token
			em.AddRule(r)
		}
		cmds = append(cmds, c)
	}
	sinktest.RegisterDevices(t, brokers, cat, cmds...)
	startSink(t, brokers, cat, em, sinks.Policy{MaxAttempts: 3, Backoff: backoff.Policy{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond}})
	sinktest.Produce(t, brokers, cat, cmds...)
	var ids []string
	for _, c := range cmds {
		ids = append(ids, c.DeliveryID)
	}
	a := sinktest.AwaitOutcomes(t, brokers, cat, ids...)
	// A repeat of every command, as a replayed route stage would write:
	// none is sent again. The first delivery's new notification shows the
	// repeats were read.
	sinktest.Produce(t, brokers, cat, cmds...)
	marker := deliveryCmd("marker", "dev-marker")
	sinktest.Produce(t, brokers, cat, marker)
	a = sinktest.AwaitOutcomes(t, brokers, cat, append(ids, marker.DeliveryID)...)

	repeats := 0
	for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions)) {
		var d schemas.Decision
		if err := schemas.Decode(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		if d.Stage == "sink" && d.Outcome == schemas.DecisionDuplicate {
			repeats++
		}
	}
	if repeats != len(cmds) {
		t.Errorf("%d repeats audited as sink duplicates, want %d", repeats, len(cmds))
	}

	pushes := map[string][]emulator.Push{}
	for _, p := range em.Received() {
		pushes[p.Token] = append(pushes[p.Token], p)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cmds[i]
			if n := len(a.Outcomes[c.DeliveryID]); n != 1 {
				t.Fatalf("%d outcomes, want 1", n)
			}
			if got := a.Outcomes[c.DeliveryID][0].Status; got != tc.want.outcome {
				t.Errorf("outcome %s, want %s", got, tc.want.outcome)
			}
			var results []string
			for n, at := range a.Attempts[c.DeliveryID] {
				results = append(results, at.Result)
				if at.Attempt != n+1 || at.APNsID != c.APNsID || at.CollapseID != c.CollapseID {
					t.Errorf("attempt %d: number %d, ids %s %s", n+1, at.Attempt, at.APNsID, at.CollapseID)
				}
			}
			if got := strings.Join(results, ","); got != tc.want.results {
				t.Errorf("attempts %q, want %q", got, tc.want.results)
			}
			got := pushes[c.Token]
			if len(got) != tc.want.pushes {
				t.Errorf("emulator read %d pushes, want %d", len(got), tc.want.pushes)
			}
			for _, p := range got {
				if p.APNsID != c.APNsID || p.CollapseID != c.CollapseID || p.NotificationID != c.NotificationID {
					t.Errorf("a push carried other ids: %+v", p)
				}
			}
			if (a.Dead[c.DeliveryID] == 1) != tc.want.dead || a.Dead[c.DeliveryID] > 1 {
				t.Errorf("%d dead letters, want dead-lettered %v", a.Dead[c.DeliveryID], tc.want.dead)
			}
			d, retired := a.Devices[c.DeviceID]
			if retired != tc.want.retired || retired && (d.Enabled || d.RetiredReason == "") {
				t.Errorf("device record %+v, want retired %v", d, tc.want.retired)
			}
			if tc.want.results == "retryable,sent" && tc.rules[0].RetryAfter > 0 {
				at := a.Attempts[c.DeliveryID]
				if gap := time.Duration(at[1].At-at[0].At) * time.Millisecond; gap < tc.rules[0].RetryAfter {
					t.Errorf("retried %v after a Retry-After of %v", gap, tc.rules[0].RetryAfter)
				}
				if at[0].RetryAfterMs != tc.rules[0].RetryAfter.Milliseconds() {
					t.Errorf("attempt records Retry-After %d ms", at[0].RetryAfterMs)
				}
			}
		})
	}
}
