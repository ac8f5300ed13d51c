package webpush_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/webpush"
	"github.com/heraldhq/herald/sinks/webpush/emulator"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// providerWith is a provider with fresh VAPID keys (it returns the public
// one) and c's other settings, its clock stopped at now unless c has one.
func providerWith(t *testing.T, c webpush.Config) (*webpush.Provider, string) {
	t.Helper()
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	c.VAPIDPublicKey, c.VAPIDPrivateKey = pub, priv
	if c.Now == nil {
		c.Now = func() time.Time { return now }
	}
	p, err := webpush.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.CloseIdleConnections)
	return p, pub
}

func TestEachPushCarriesTheTopicTTLAndUrgencyItsCommandAndConfigurationSay(t *testing.T) {
	em := startEmulator(t)
	topic, _ := identity.WebPushTopic(nid)
	cases := []struct {
		name    string
		cfg     webpush.Config
		expires time.Duration // after now; 0: no expiry
		ttl     string
		urgency string
	}{
		{name: "without configuration the TTL is the time left and the urgency high", expires: time.Hour, ttl: "3600", urgency: "high"},
		{name: "a configured urgency is sent", cfg: webpush.Config{Urgency: "low"}, expires: time.Hour, ttl: "3600", urgency: "low"},
		{name: "the TTL counts whole seconds left", expires: 90*time.Second + 999*time.Millisecond, ttl: "90", urgency: "high"},
		{name: "an expiry already past sends a TTL of zero", expires: -time.Minute, ttl: "0", urgency: "high"},
		{name: "a command without expiry gets the 28-day maximum", ttl: "2419200", urgency: "high"},
		{name: "a later expiry is capped at the 28-day maximum", expires: 40 * 24 * time.Hour, ttl: "2419200", urgency: "high"},
		{name: "the TTL is capped at the configured maximum", cfg: webpush.Config{MaxTTL: 10 * time.Minute}, expires: time.Hour, ttl: "600", urgency: "high"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := providerWith(t, tc.cfg)
			id := "headers-" + strconv.Itoa(i)
			sub, err := em.Subscribe(id)
			if err != nil {
				t.Fatal(err)
			}
			cmd := command(sub)
			cmd.ExpiresAt = 0
			if tc.expires != 0 {
				cmd.ExpiresAt = now.Add(tc.expires).UnixMilli()
			}
			res := p.Send(context.Background(), cmd)
			if res.Class != sinks.Success || !strings.HasPrefix(res.MessageID, em.URL()+"/message/"+id+"/") {
				t.Fatalf("got %v %q message id %q (%v), want a success with the push service's Location", res.Class, res.Rule, res.MessageID, res.Err)
			}
			var push emulator.Push
			for _, r := range em.Received() {
				if r.Subscription == id {
					push = r
				}
			}
			if push.Topic != topic || push.TTL != tc.ttl || push.Urgency != tc.urgency || push.Encoding != "aes128gcm" {
				t.Fatalf("Topic %q TTL %q Urgency %q Content-Encoding %q, want %q %q %q aes128gcm", push.Topic, push.TTL, push.Urgency, push.Encoding, topic, tc.ttl, tc.urgency)
			}
		})
	}
}

// vapidClaims is the claims of the VAPID JWT in a request's Authorization
// header ("vapid t=<jwt>, k=<public key>").
func vapidClaims(t *testing.T, authorization string) map[string]any {
	t.Helper()
	tok, _, _ := strings.Cut(strings.TrimPrefix(authorization, "vapid t="), ",")
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("Authorization %q holds no JWT", authorization)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("JWT claims: %v", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatalf("JWT claims: %v", err)
	}
	return claims
}

func TestTheVAPIDContactIsAMailtoAddressOrAnHTTPSURL(t *testing.T) {
	var mu sync.Mutex
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = r.Header.Get("Authorization")
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	cases := []struct{ name, subscriber, sub string }{
		{"without configuration it is herald's placeholder address", "", "mailto:ops@herald.invalid"},
		{"a mailto: address is sent as configured", "mailto:push@example.com", "mailto:push@example.com"},
		{"an https URL is sent as configured", "https://example.com/contact", "https://example.com/contact"},
		{"a bare address becomes a mailto: address", "push@example.com", "mailto:push@example.com"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := providerWith(t, webpush.Config{Subscriber: tc.subscriber})
			if res := p.Send(context.Background(), command(browserSubscription(t, srv.URL+"/push/x"))); res.Class != sinks.Success {
				t.Fatalf("send: %v %q (%v)", res.Class, res.Rule, res.Err)
			}
			mu.Lock()
			claims := vapidClaims(t, auth)
			mu.Unlock()
			if claims["sub"] != tc.sub || claims["aud"] != srv.URL {
				t.Fatalf("VAPID sub %v aud %v, want %q %q", claims["sub"], claims["aud"], tc.sub, srv.URL)
			}
		})
	}
}

// browserSubscription is a subscription at endpoint with a browser's keys
// (a P-256 point and 16 bytes of auth secret).
func browserSubscription(t *testing.T, endpoint string) *schemas.WebPushSubscription {
	t.Helper()
	pub, _, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	return &schemas.WebPushSubscription{Endpoint: endpoint, P256dh: pub, Auth: "AAAAAAAAAAAAAAAAAAAAAA"}
}

func TestACommandWithoutASubscriptionOrAValidIdIsPermanentAndNeverSent(t *testing.T) {
	em := startEmulator(t)
	p, _ := providerWith(t, webpush.Config{})
	cases := []struct {
		name   string
		edit   func(*schemas.DeliveryCommand)
		rule   string
		retire bool
	}{
		{"no subscription retires the device", func(c *schemas.DeliveryCommand) { c.WebPush = nil }, "bad_subscription", true},
		{"a subscription without endpoint retires the device", func(c *schemas.DeliveryCommand) { c.WebPush.Endpoint = "" }, "bad_subscription", true},
		{"a notification id that is no id keeps the device", func(c *schemas.DeliveryCommand) { c.NotificationID = "not-an-id" }, "bad_request", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := em.Subscribe("")
			if err != nil {
				t.Fatal(err)
			}
			cmd := command(sub)
			tc.edit(cmd)
			res := p.Send(context.Background(), cmd)
			if res.Class != sinks.Permanent || res.Rule != tc.rule || res.RetireDevice != tc.retire {
				t.Fatalf("got %v %q retire %v (%v), want permanent %q retire %v", res.Class, res.Rule, res.RetireDevice, res.Err, tc.rule, tc.retire)
			}
			if n := em.Total(); n != 0 {
				t.Fatalf("the push service read %d pushes", n)
			}
		})
	}
}

func TestAPushServiceThatRefusesTheConnectionIsRetryable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	p, _ := providerWith(t, webpush.Config{})
	res := p.Send(context.Background(), command(browserSubscription(t, "http://"+addr+"/push/x")))
	if res.Class != sinks.Retryable || res.Rule != "not_sent" || res.RetireDevice {
		t.Fatalf("got %v %q retire %v (%v), want retryable not_sent", res.Class, res.Rule, res.RetireDevice, res.Err)
	}
}

func TestThePayloadCarriesTheNotificationAndTheProducersURL(t *testing.T) {
	occurrence := identity.OccurrenceID(nid, now.UnixMilli())
	cases := []struct {
		name    string
		payload string
		occ     string
		url     string
	}{
		{"the producer's url is the payload's", `{"url":"https://example.com/inv_2201","other":1}`, "", "https://example.com/inv_2201"},
		{"a producer payload without url gives none", `{"invoice":"inv_2201"}`, "", ""},
		{"a producer payload that is no object gives no url", `["https://example.com"]`, "", ""},
		{"no producer payload gives no url", ``, "", ""},
		{"the occurrence is carried for the service worker's seen-set", `{"url":"https://example.com/x"}`, occurrence, "https://example.com/x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := command(nil)
			cmd.Payload, cmd.OccurrenceID = json.RawMessage(tc.payload), tc.occ
			want := webpush.Payload{ID: nid, OccurrenceID: tc.occ, Title: cmd.Title, Body: cmd.Body, URL: tc.url, Type: cmd.Type}
			if got := webpush.PayloadOf(cmd); got != want {
				t.Fatalf("payload %+v, want %+v", got, want)
			}
		})
	}
}

func TestTheVAPIDKeyPairIsRequired(t *testing.T) {
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  webpush.Config
	}{
		{"no keys", webpush.Config{}},
		{"the public key alone", webpush.Config{VAPIDPublicKey: pub}},
		{"the private key alone", webpush.Config{VAPIDPrivateKey: priv}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := webpush.New(tc.cfg); err == nil {
				t.Fatal("accepted")
			} else if strings.Contains(err.Error(), priv) {
				t.Fatalf("the error quotes the private key: %v", err)
			}
		})
	}
}
