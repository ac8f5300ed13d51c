package webhook_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync/atomic"
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

func TestClassifyDrawsEachLineOfThePackageTableAtItsBoundaries(t *testing.T) {
	cases := []struct {
		status int
		class  sinks.Class
		rule   string
	}{
		{199, sinks.Retryable, "rejected"},
		{200, sinks.Success, "accepted"}, {299, sinks.Success, "accepted"},
		{300, sinks.Retryable, "redirect"}, {399, sinks.Retryable, "redirect"},
		{400, sinks.Retryable, "rejected"}, {409, sinks.Retryable, "rejected"}, {411, sinks.Retryable, "rejected"}, {499, sinks.Retryable, "rejected"},
		{410, sinks.Permanent, "gone"}, {429, sinks.Retryable, "too_many_requests"},
		{500, sinks.Retryable, "server_error"}, {599, sinks.Retryable, "server_error"},
	}
	for _, c := range cases {
		t.Run(strconv.Itoa(c.status)+" is "+c.rule, func(t *testing.T) {
			r := webhook.Classify(c.status)
			if r.Class != c.class || r.Rule != c.rule || r.Status != c.status || r.RetireDevice != (c.status == http.StatusGone) {
				t.Fatalf("Classify(%d) = %+v, want %v/%s", c.status, r, c.class, c.rule)
			}
			if want := map[bool]string{true: "", false: http.StatusText(c.status)}[c.class == sinks.Success]; r.Reason != want {
				t.Fatalf("reason %q, want %q", r.Reason, want)
			}
		})
	}
}

// TestTheAdapterEndsAnUnusableEndpointWithoutCallingIt: an endpoint
// whose secret cannot sign or whose URL cannot be requested ends its
// delivery permanent, and nothing is sent.
func TestTheAdapterEndsAnUnusableEndpointWithoutCallingIt(t *testing.T) {
	em := startReceiver(t)
	tbl := webhook.NewTable("herald.webhooks")
	p, err := webhook.New(webhook.Config{Endpoints: tbl, Topic: "herald.webhooks", AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	badSecret := endpoint("bad-secret", em.EndpointURL("bad-secret"), schemas.EventDeliveryFailed)
	badSecret.Secret = "whsec_c2hvcnQ="
	badURL := endpoint("bad-url", "http://[::1/hooks", schemas.EventDeliveryFailed)
	for _, c := range []struct {
		ep   schemas.Webhook
		rule string
	}{{badSecret, "bad_secret"}, {badURL, "bad_url"}} {
		t.Run("an endpoint with a "+c.rule+" is permanent", func(t *testing.T) {
			tbl.Put(c.ep)
			res := send(p, webhook.Commands(outcome(), []schemas.Webhook{c.ep})[0], 2*time.Second)
			if res.Class != sinks.Permanent || res.Rule != c.rule || res.Err == nil {
				t.Fatalf("result %+v, want permanent %s with its error", res, c.rule)
			}
		})
	}
	if em.Total() != 0 {
		t.Fatalf("the receiver read %d messages", em.Total())
	}
}

// countingTransport counts the requests it carries to its base.
type countingTransport struct {
	base http.RoundTripper
	n    atomic.Int32
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

// TestTheAdapterCallsThroughTheClientItIsGivenAtItsClocksTime: a
// configured client makes the calls (CloseIdleConnections leaves it
// alone) and webhook-timestamp is the configured clock's second; the
// adapter needs its endpoints and the topic a 410 writes to.
func TestTheAdapterCallsThroughTheClientItIsGivenAtItsClocksTime(t *testing.T) {
	em := startReceiver(t)
	tbl := webhook.NewTable("herald.webhooks")
	ep := endpoint("own-client", em.EndpointURL("own-client"), schemas.EventDeliveryFailed)
	tbl.Put(ep)
	em.AddSecret(ep.Secret)
	tr := &countingTransport{base: http.DefaultTransport}
	clock := time.Now().Add(-time.Minute).Truncate(time.Second)
	p, err := webhook.New(webhook.Config{Endpoints: tbl, Topic: "herald.webhooks", Client: &http.Client{Transport: tr}, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	if res := send(p, webhook.Commands(outcome(), []schemas.Webhook{ep})[0], 2*time.Second); res.Class != sinks.Success {
		t.Fatalf("result %+v, want success", res)
	}
	p.CloseIdleConnections()
	if tr.n.Load() != 1 {
		t.Fatalf("the given client carried %d requests, want 1", tr.n.Load())
	}
	if m := em.Received(); len(m) != 1 || !m[0].Verified || m[0].Timestamp != strconv.FormatInt(clock.Unix(), 10) {
		t.Fatalf("received %+v, want one verified message stamped %d", m, clock.Unix())
	}
	for _, c := range []webhook.Config{{Topic: "herald.webhooks"}, {Endpoints: tbl}} {
		if _, err := webhook.New(c); err == nil {
			t.Fatalf("New(%+v) built an adapter", c)
		}
	}
}

// TestA410DisablesTheEndpointKeepingTheRestOfItsRecord: Retire rewrites
// the endpoint's record on herald.webhooks, disabled with the reason and
// the time; an endpoint deleted meanwhile stays deleted.
func TestA410DisablesTheEndpointKeepingTheRestOfItsRecord(t *testing.T) {
	tbl := webhook.NewTable("herald.webhooks")
	ep := endpoint("gone", "https://x/gone", schemas.EventDeliveryFailed)
	tbl.Put(ep)
	p, err := webhook.New(webhook.Config{Endpoints: tbl, Topic: "t.webhooks"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := webhook.Commands(outcome(), []schemas.Webhook{ep})[0]
	now := time.UnixMilli(1_700_000_000_123)
	recs := p.Retire(cmd, "gone: 410", now)
	if len(recs) != 1 || recs[0].Topic != "t.webhooks" || string(recs[0].Key) != webhook.Key("acme", "gone") ||
		len(recs[0].Headers) != 1 || recs[0].Headers[0].Key != schemas.HeaderSchema || string(recs[0].Headers[0].Value) != ep.SchemaName() {
		t.Fatalf("records %+v, want the endpoint's record on t.webhooks", recs)
	}
	var w schemas.Webhook
	if err := schemas.Decode(recs[0].Value, &w); err != nil {
		t.Fatal(err)
	}
	want := ep
	want.Enabled, want.DisabledReason, want.UpdatedAt = false, "gone: 410", now.UnixMilli()
	w.Schema = "" // the codec's, not the endpoint's
	if !reflect.DeepEqual(w, want) {
		t.Fatalf("record %+v, want %+v", w, want)
	}
	tbl.Delete("acme", "gone")
	if recs := p.Retire(cmd, "gone: 410", now); recs != nil {
		t.Fatalf("records %+v for a deleted endpoint, want none", recs)
	}
}

// TestAnEndpointCreatedAtTheOutcomesTimeGetsItsEvents: "at or after its
// creation" includes the millisecond itself, for per-delivery events and
// send.completed alike.
func TestAnEndpointCreatedAtTheOutcomesTimeGetsItsEvents(t *testing.T) {
	o := outcome()
	ep := endpoint("same-ms", "https://x/same-ms", schemas.EventDeliveryFailed, schemas.EventSendCompleted)
	ep.CreatedAt = o.At
	if cmds := webhook.Commands(o, []schemas.Webhook{ep}); len(cmds) != 1 {
		t.Fatalf("%d delivery.failed commands, want 1", len(cmds))
	}
	var e *schemas.Completion
	e, _ = webhook.ApplyDecision(e, routeDecision(schemas.DecisionRouted, "fcm/d1"), 0)
	e, _ = webhook.ApplyOutcome(e, o, 0)
	if cmds := webhook.CompletionCommands(e, []schemas.Webhook{ep}); len(cmds) != 1 {
		t.Fatalf("%d send.completed commands, want 1", len(cmds))
	}
}
