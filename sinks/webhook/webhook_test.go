package webhook_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/webhook"
	"github.com/heraldhq/herald/sinks/webhook/emulator"
)

// outcome is a failed FCM delivery of tenant acme.
// outcomeAt is when the test outcome happened: a few minutes before the
// test process started, so its webhook deliveries are inside their TTL
// whatever the date the suite runs on (a fixed date made every command
// "expired before the first attempt" a day later).
var outcomeAt = time.Now().Add(-5 * time.Minute).UnixMilli()

func outcome() *schemas.Outcome {
	nid := "52f364d9288c640b306b566e509104bd"
	return &schemas.Outcome{DeliveryID: identity.DeliveryID(nid, "d1"), NotificationID: nid, Tenant: "acme", Type: "invoice.paid",
		Recipient: "u1", DeviceID: "d1", Channel: "fcm", Status: schemas.OutcomeFailed, Reason: "permanent: INVALID_ARGUMENT", Attempts: 1,
		At: outcomeAt}
}

func endpoint(id, url string, events ...string) schemas.Webhook {
	return schemas.Webhook{Tenant: "acme", ID: id, URL: url, Secret: webhook.NewSecret(), Events: events, Enabled: true}
}

func startReceiver(t *testing.T) *emulator.Emulator {
	t.Helper()
	em, err := emulator.Start(emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	return em
}

func send(p *webhook.Provider, cmd *schemas.DeliveryCommand, timeout time.Duration) sinks.Result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.Send(ctx, cmd)
}

func TestEachWebhookAnswerIsClassifiedAsThePackageTableSays(t *testing.T) {
	em := startReceiver(t)
	tbl := webhook.NewTable("herald.webhooks")
	p, err := webhook.New(webhook.Config{Endpoints: tbl, Topic: "herald.webhooks", AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.CloseIdleConnections)
	redirect := httptest.NewServer(http.RedirectHandler(em.URL()+"/hooks/elsewhere", http.StatusFound))
	t.Cleanup(redirect.Close)
	refused, _ := net.Listen("tcp", "127.0.0.1:0")
	refusedURL := "http://" + refused.Addr().String() + "/hooks/x"
	refused.Close()

	cases := []struct {
		name    string
		rule    emulator.Rule
		url     string // "" : the receiver's
		enabled *bool
		missing bool
		unknown bool // the receiver does not know the endpoint's secret
		class   sinks.Class
		rule_   string
		retire  bool
		after   time.Duration
		timeout time.Duration
	}{
		{name: "a verified message answered 204 is a success", class: sinks.Success, rule_: "accepted"},
		{name: "410 Gone is permanent and disables the endpoint", rule: emulator.Rule{Status: 410}, class: sinks.Permanent, rule_: "gone", retire: true},
		{name: "429 is retryable with its Retry-After", rule: emulator.Rule{Status: 429, RetryAfter: 7 * time.Second}, class: sinks.Retryable, rule_: "too_many_requests", after: 7 * time.Second},
		{name: "503 is retryable with its Retry-After", rule: emulator.Rule{Status: 503, RetryAfter: 3 * time.Second}, class: sinks.Retryable, rule_: "server_error", after: 3 * time.Second},
		{name: "500 is retryable", rule: emulator.Rule{Status: 500}, class: sinks.Retryable, rule_: "server_error"},
		{name: "another 4xx is retryable, as the specification treats every failure", rule: emulator.Rule{Status: 400}, class: sinks.Retryable, rule_: "rejected"},
		{name: "a receiver that cannot verify the signature answers 401: retryable", unknown: true, class: sinks.Retryable, rule_: "rejected"},
		{name: "a redirect is not followed and is retryable", url: redirect.URL + "/hooks/r", class: sinks.Retryable, rule_: "redirect"},
		{name: "a reset after the request was read is ambiguous", rule: emulator.Rule{Reset: true}, class: sinks.Ambiguous, rule_: "no_answer"},
		{name: "an answer slower than the call's deadline is ambiguous", rule: emulator.Rule{Delay: time.Hour}, class: sinks.Ambiguous, rule_: "no_answer", timeout: 300 * time.Millisecond},
		{name: "a refused connection is retryable: nothing was sent", url: refusedURL, class: sinks.Retryable, rule_: "not_sent"},
		{name: "an endpoint deleted since the fan-out is permanent", missing: true, class: sinks.Permanent, rule_: "endpoint_deleted"},
		{name: "a disabled endpoint is permanent", enabled: new(bool), class: sinks.Permanent, rule_: "endpoint_disabled"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := "ep" + string(rune('a'+i))
			url := tc.url
			if url == "" {
				url = em.EndpointURL(id)
			}
			ep := endpoint(id, url, schemas.EventDeliveryFailed)
			if tc.enabled != nil {
				ep.Enabled = *tc.enabled
			}
			if !tc.missing {
				tbl.Put(ep)
			}
			if !tc.missing && !tc.unknown {
				em.AddSecret(ep.Secret)
			}
			if tc.rule != (emulator.Rule{}) {
				r := tc.rule
				r.Token, r.Times = id, 1
				em.AddRule(r)
			}
			cmd := webhook.Commands(outcome(), []schemas.Webhook{{Tenant: "acme", ID: id, Events: []string{schemas.EventDeliveryFailed}, Enabled: true}})[0]
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 2 * time.Second
			}
			res := send(p, cmd, timeout)
			if res.Class != tc.class || res.Rule != tc.rule_ || res.RetireDevice != tc.retire || res.RetryAfter != tc.after {
				t.Fatalf("got %v/%s retire=%v after=%v (err %v), want %v/%s retire=%v after=%v",
					res.Class, res.Rule, res.RetireDevice, res.RetryAfter, res.Err, tc.class, tc.rule_, tc.retire, tc.after)
			}
		})
	}
}

// TestEveryAttemptIsSignedAndARetryKeepsTheWebhookID: the receiver
// verifies each attempt's signature; a retry of one delivery carries the
// same webhook-id (the event's), re-signed with its own timestamp.
func TestEveryAttemptIsSignedAndARetryKeepsTheWebhookID(t *testing.T) {
	em := startReceiver(t)
	tbl := webhook.NewTable("herald.webhooks")
	clock := time.Now()
	p, err := webhook.New(webhook.Config{Endpoints: tbl, Topic: "herald.webhooks", AllowPrivate: true, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	ep := endpoint("orders", em.EndpointURL("orders"), schemas.EventDeliveryFailed)
	tbl.Put(ep)
	em.AddSecret(ep.Secret)
	em.AddRule(emulator.Rule{Token: "orders", Status: 503, Times: 1})
	cmd := webhook.Commands(outcome(), []schemas.Webhook{ep})[0]

	if res := send(p, cmd, 2*time.Second); res.Class != sinks.Retryable {
		t.Fatalf("first attempt %v/%s, want retryable (503)", res.Class, res.Rule)
	}
	clock = clock.Add(2 * time.Second)
	if res := send(p, cmd, 2*time.Second); res.Class != sinks.Success {
		t.Fatalf("retry %v/%s, want success", res.Class, res.Rule)
	}
	msgs := em.Received()
	if len(msgs) != 2 {
		t.Fatalf("the receiver read %d messages, want 2", len(msgs))
	}
	for i, m := range msgs {
		if !m.Verified {
			t.Errorf("attempt %d did not verify: %s", i+1, m.VerifyError)
		}
		if m.ID != cmd.CollapseID || m.ID != "msg_"+identity.WebhookEventID(outcome().DeliveryID, schemas.EventDeliveryFailed) {
			t.Errorf("attempt %d webhook-id %s, want the event's msg_ id %s", i+1, m.ID, cmd.CollapseID)
		}
		if m.Body != string(cmd.Payload) {
			t.Errorf("attempt %d body changed", i+1)
		}
	}
	if msgs[0].Timestamp == msgs[1].Timestamp || msgs[0].Signature == msgs[1].Signature {
		t.Error("the retry was not re-signed with its own timestamp")
	}
	var ev webhook.Event
	if err := json.Unmarshal([]byte(msgs[0].Body), &ev); err != nil || ev.Type != schemas.EventDeliveryFailed || ev.Data.DeliveryID != outcome().DeliveryID ||
		ev.Data.Status != schemas.OutcomeFailed || ev.Timestamp != time.UnixMilli(outcomeAt).UTC().Format("2006-01-02T15:04:05.000Z") {
		t.Fatalf("body %s (%v), want the delivery.failed event of the outcome", msgs[0].Body, err)
	}
}

func TestAnOutcomeFansOutToTheSubscribedEndpointsOfItsTenant(t *testing.T) {
	o := outcome()
	on := func(id string, events ...string) schemas.Webhook { return endpoint(id, "http://x/"+id, events...) }
	late := on("late", schemas.EventDeliveryFailed)
	late.CreatedAt = o.At + 1
	off := on("off", schemas.EventDeliveryFailed)
	off.Enabled = false
	other := on("other", schemas.EventDeliveryFailed)
	other.Tenant = "globex"
	cases := []struct {
		name      string
		mutate    func(*schemas.Outcome)
		endpoints []schemas.Webhook
		want      []string // endpoint/event
	}{
		{"a failed delivery raises completed and failed to the endpoints subscribed to each", nil,
			[]schemas.Webhook{on("all", schemas.WebhookEvents...), on("fails", schemas.EventDeliveryFailed), on("retired", schemas.EventDeviceRetired)},
			[]string{"all/delivery.completed", "all/delivery.failed", "fails/delivery.failed"}},
		{"a retired device raises completed and device.retired", func(o *schemas.Outcome) { o.Status = schemas.OutcomeDeviceRetired },
			[]schemas.Webhook{on("all", schemas.WebhookEvents...)}, []string{"all/delivery.completed", "all/device.retired"}},
		{"a delivered push raises completed only", func(o *schemas.Outcome) { o.Status = schemas.OutcomeDelivered },
			[]schemas.Webhook{on("all", schemas.WebhookEvents...)}, []string{"all/delivery.completed"}},
		{"a webhook delivery's own outcome raises nothing", func(o *schemas.Outcome) { o.Channel = webhook.Channel },
			[]schemas.Webhook{on("all", schemas.WebhookEvents...)}, nil},
		{"a disabled endpoint, one created after the outcome and another tenant's get nothing", nil,
			[]schemas.Webhook{late, off, other}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := outcome()
			if c.mutate != nil {
				c.mutate(o)
			}
			var got []string
			for _, cmd := range webhook.Commands(o, c.endpoints) {
				got = append(got, cmd.DeviceID+"/"+cmd.Title)
				ev := cmd.Title
				if cmd.CollapseID != "msg_"+identity.WebhookEventID(o.DeliveryID, ev) || cmd.DeliveryID != identity.DeliveryID(identity.WebhookEventID(o.DeliveryID, ev), cmd.DeviceID) {
					t.Errorf("%s: ids %s %s are not derived from the outcome, the event and the endpoint", cmd.DeviceID, cmd.CollapseID, cmd.DeliveryID)
				}
				if cmd.Channel != webhook.Channel || cmd.Tenant != "acme" {
					t.Errorf("command %+v is not a webhook delivery of acme", cmd)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("got %v, want %v", got, c.want)
				}
			}
		})
	}
	t.Run("the same outcome read twice gives the same commands", func(t *testing.T) {
		eps := []schemas.Webhook{on("all", schemas.WebhookEvents...)}
		a, b := webhook.Commands(outcome(), eps), webhook.Commands(outcome(), eps)
		for i := range a {
			if a[i].DeliveryID != b[i].DeliveryID || string(a[i].Payload) != string(b[i].Payload) {
				t.Fatal("the commands differ")
			}
		}
	})
}
