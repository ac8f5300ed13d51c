package api

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sinks/webhook"
	"github.com/heraldhq/herald/topics"
)

// webhookRecords reads herald.webhooks: the committed records of one key.
func (p *pipeline) webhookRecords(t *testing.T, tenant, id string) []*schemas.Webhook {
	t.Helper()
	var out []*schemas.Webhook
	for _, r := range testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Webhooks)) {
		if string(r.Key) != webhook.Key(tenant, id) {
			continue
		}
		if r.Value == nil {
			out = append(out, nil)
			continue
		}
		var w schemas.Webhook
		if err := schemas.Decode(r.Value, &w); err != nil {
			t.Fatal(err)
		}
		out = append(out, &w)
	}
	return out
}

// hosts resolves the names it holds and no other (a stand-in for DNS
// answers a test cannot get from the real one: a public name pointed at
// an internal address).
type hosts map[string][]netip.Addr

func (h hosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if ips, ok := h[host]; ok {
		return ips, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestWebhookEndpointsOnTheRealBroker(t *testing.T) {
	p := startPipelineWith(t, false, func(c *Config) {
		c.Resolver = hosts{
			"intranet.example.com": {netip.MustParseAddr("203.0.114.9"), netip.MustParseAddr("10.0.0.7")},
			"hooks.example.com":    {netip.MustParseAddr("93.184.215.14")},
		}
	})
	const body = `{"url":"https://hooks.example.com/herald","events":["delivery.failed","device.retired"]}`
	var created sdk.Webhook
	t.Run("a PUT registers an endpoint with a fresh whsec_ secret, on herald.webhooks", func(t *testing.T) {
		a := p.call(t, "PUT", "/v1/webhooks/orders", keyA, body)
		if a.status != 201 {
			t.Fatalf("PUT: %d %s", a.status, a.body)
		}
		created = decode[sdk.Webhook](t, a)
		if _, err := webhook.SecretKey(created.Secret); err != nil || !created.Enabled || created.URL != "https://hooks.example.com/herald" ||
			!slices.Equal(created.Events, []string{"delivery.failed", "device.retired"}) {
			t.Fatalf("created %+v (secret: %v)", created, err)
		}
		recs := p.webhookRecords(t, "ta", "orders")
		if len(recs) != 1 || recs[0] == nil || recs[0].Secret != created.Secret || recs[0].Tenant != "ta" {
			t.Fatalf("records %+v, want the endpoint once", recs)
		}
	})
	t.Run("the same PUT again answers the same endpoint and writes nothing", func(t *testing.T) {
		a := p.call(t, "PUT", "/v1/webhooks/orders", keyA, body)
		if a.status != 200 {
			t.Fatalf("PUT again: %d %s", a.status, a.body)
		}
		if again := decode[sdk.Webhook](t, a); again.Secret != "" || again.CreatedAt != created.CreatedAt || again.UpdatedAt != created.UpdatedAt {
			t.Fatalf("again %+v, want %+v without its secret (only the creation shows it)", again, created)
		}
		if recs := p.webhookRecords(t, "ta", "orders"); len(recs) != 1 {
			t.Fatalf("%d records, want 1", len(recs))
		}
	})
	t.Run("a PUT with a secret and other events replaces the endpoint", func(t *testing.T) {
		const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		a := p.call(t, "PUT", "/v1/webhooks/billing", keyA, `{"url":"https://billing.example.com/hooks/b","events":["delivery.completed"],"secret":"`+secret+`","enabled":false}`)
		if a.status != 201 {
			t.Fatalf("PUT: %d %s", a.status, a.body)
		}
		if got := decode[sdk.Webhook](t, a); got.Secret != secret || got.Enabled {
			t.Fatalf("got %+v", got)
		}
	})
	t.Run("list and get answer the tenant's endpoints", func(t *testing.T) {
		l := decode[sdk.WebhookList](t, p.call(t, "GET", "/v1/webhooks", keyA, ""))
		if len(l.Webhooks) != 2 || l.Webhooks[0].ID != "billing" || l.Webhooks[1].ID != "orders" {
			t.Fatalf("list %+v, want billing and orders", l)
		}
		if g := decode[sdk.Webhook](t, p.call(t, "GET", "/v1/webhooks/orders", keyA, "")); g.ID != "orders" || g.CreatedAt != created.CreatedAt {
			t.Fatalf("get %+v", g)
		}
	})
	t.Run("neither list nor get shows a signing secret", func(t *testing.T) {
		for _, path := range []string{"/v1/webhooks", "/v1/webhooks/orders", "/v1/webhooks/billing"} {
			a := p.call(t, "GET", path, keyA, "")
			if a.status != 200 || strings.Contains(string(a.body), `"secret"`) || strings.Contains(string(a.body), "whsec_") {
				t.Errorf("GET %s: %d %s, want no secret", path, a.status, a.body)
			}
		}
	})
	t.Run("problems name the offending field", func(t *testing.T) {
		cases := []struct{ name, body, field string }{
			{"a missing url", `{"events":["delivery.failed"]}`, "url"},
			{"a url that is not http or https", `{"url":"ftp://x/y","events":["delivery.failed"]}`, "url"},
			{"no events", `{"url":"https://x/y","events":[]}`, "events"},
			{"a missing events list", `{"url":"https://x/y"}`, "events"},
			{"an unknown event", `{"url":"https://x/y","events":["delivery.failed","invoice.paid"]}`, "events[1]"},
			{"a repeated event", `{"url":"https://x/y","events":["delivery.failed","delivery.failed"]}`, "events[1]"},
			{"a secret without whsec_", `{"url":"https://x/y","events":["delivery.failed"],"secret":"abc"}`, "secret"},
			{"a secret too short", `{"url":"https://x/y","events":["delivery.failed"],"secret":"whsec_c2hvcnQ="}`, "secret"},
			{"an unknown member", `{"url":"https://x/y","events":["delivery.failed"],"colour":"red"}`, "colour"},
			{"a url with a password", `{"url":"https://u:p@x/y","events":["delivery.failed"]}`, "url"},
			{"a loopback address", `{"url":"http://127.0.0.1:8080/hook","events":["delivery.failed"]}`, "url"},
			{"an IPv6 loopback address", `{"url":"http://[::1]/hook","events":["delivery.failed"]}`, "url"},
			{"localhost", `{"url":"http://localhost:4020/hooks/x","events":["delivery.failed"]}`, "url"},
			{"a private address", `{"url":"https://10.1.2.3/hook","events":["delivery.failed"]}`, "url"},
			{"the cloud metadata address", `{"url":"http://169.254.169.254/latest/meta-data","events":["delivery.failed"]}`, "url"},
			{"an IPv4-mapped private address", `{"url":"http://[::ffff:192.168.1.1]/hook","events":["delivery.failed"]}`, "url"},
			{"a name resolving to a private address", `{"url":"https://intranet.example.com/hook","events":["delivery.failed"]}`, "url"},
		}
		for _, c := range cases {
			t.Run(c.name+" is a problem naming "+c.field, func(t *testing.T) {
				a := p.call(t, "PUT", "/v1/webhooks/bad", keyA, c.body)
				if a.status != 422 && a.status != 400 {
					t.Fatalf("status %d %s, want 422 or 400", a.status, a.body)
				}
				if a.header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("content type %q", a.header.Get("Content-Type"))
				}
				pr := decode[sdk.Problem](t, a)
				if !slices.ContainsFunc(pr.Errors, func(e sdk.FieldError) bool { return e.Field == c.field }) {
					t.Fatalf("errors %+v, want one naming %s", pr.Errors, c.field)
				}
			})
		}
		if a := p.call(t, "GET", "/v1/webhooks/bad", keyA, ""); a.status != 404 {
			t.Fatalf("a refused PUT stored an endpoint: %d", a.status)
		}
	})
	t.Run("another tenant can neither see nor delete them", func(t *testing.T) {
		if l := decode[sdk.WebhookList](t, p.call(t, "GET", "/v1/webhooks", keyB, "")); len(l.Webhooks) != 0 {
			t.Fatalf("tenant b lists %+v", l)
		}
		for _, m := range []string{"GET", "DELETE"} {
			if a := p.call(t, m, "/v1/webhooks/orders", keyB, ""); a.status != 404 {
				t.Fatalf("%s by tenant b: %d, want 404", m, a.status)
			}
		}
		if a := p.call(t, "PUT", "/v1/webhooks/orders", keyB, body); a.status != 201 {
			t.Fatalf("tenant b's own orders: %d %s", a.status, a.body)
		}
		if recs := p.webhookRecords(t, "ta", "orders"); len(recs) != 1 || recs[0].Secret != created.Secret {
			t.Fatal("tenant b's PUT changed tenant a's endpoint")
		}
	})
	t.Run("a fresh replica reads the endpoints from herald.webhooks", func(t *testing.T) {
		srv, err := New(Config{Brokers: p.brokers, Catalog: p.cat, Keys: testKeys(), InstanceID: "fresh-wh", Logger: slog.New(slog.DiscardHandler),
			AllowPrivateWebhooks: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		hs := httptest.NewServer(srv)
		defer hs.Close()
		fresh := &pipeline{brokers: p.brokers, cat: p.cat, srv: srv, url: hs.URL}
		p.eventually(t, "the fresh replica lists both endpoints", func() bool {
			a := fresh.call(t, "GET", "/v1/webhooks", keyA, "")
			return a.status == 200 && len(decode[sdk.WebhookList](t, a).Webhooks) == 2
		})
		t.Run("and, allowed private addresses, accepts a loopback endpoint", func(t *testing.T) {
			a := fresh.call(t, "PUT", "/v1/webhooks/local", keyB, `{"url":"http://127.0.0.1:4020/hooks/local","events":["delivery.failed"]}`)
			if a.status != 201 {
				t.Fatalf("PUT: %d %s, want 201", a.status, a.body)
			}
		})
	})
	t.Run("a DELETE removes the endpoint with a tombstone", func(t *testing.T) {
		if a := p.call(t, "DELETE", "/v1/webhooks/orders", keyA, ""); a.status != 204 {
			t.Fatalf("delete: %d %s", a.status, a.body)
		}
		if a := p.call(t, "GET", "/v1/webhooks/orders", keyA, ""); a.status != 404 {
			t.Fatalf("after delete: %d", a.status)
		}
		if a := p.call(t, "DELETE", "/v1/webhooks/orders", keyA, ""); a.status != 404 {
			t.Fatalf("second delete: %d, want 404", a.status)
		}
		recs := p.webhookRecords(t, "ta", "orders")
		if len(recs) != 2 || recs[1] != nil {
			t.Fatalf("records %+v, want the endpoint then a tombstone", recs)
		}
	})
}
