package webpush_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/webpush"
)

const nid = "52f364d9288c640b306b566e509104bd"

// pushService is web-push-testing behind a recording reverse proxy: the
// service decrypts what it receives, the proxy shows the headers on the
// wire (web-push-testing does not report them).
type pushService struct {
	t       *testing.T
	base    string // web-push-testing
	proxy   *httptest.Server
	mu      sync.Mutex
	headers []http.Header
}

func startPushService(t *testing.T) *pushService {
	s := &pushService{t: t, base: testenv.WebPushService(t)}
	target, _ := url.Parse(s.base)
	rp := httputil.NewSingleHostReverseProxy(target)
	s.proxy = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(s.proxy.Close)
	return s
}

// subscribe makes a browser subscription for the VAPID public key; the
// endpoint goes through the proxy.
func (s *pushService) subscribe(vapidPublic string) (*schemas.WebPushSubscription, string) {
	var out struct {
		Data struct {
			Endpoint string `json:"endpoint"`
			Keys     struct {
				P256dh string `json:"p256dh"`
				Auth   string `json:"auth"`
			} `json:"keys"`
			ClientHash string `json:"clientHash"`
		} `json:"data"`
	}
	s.post("/subscribe", map[string]string{"userVisibleOnly": "true", "applicationServerKey": vapidPublic}, &out)
	ep, err := url.Parse(out.Data.Endpoint)
	if err != nil || out.Data.ClientHash == "" {
		s.t.Fatalf("subscribe: %+v (%v)", out, err)
	}
	ep.Host = strings.TrimPrefix(s.proxy.URL, "http://")
	return &schemas.WebPushSubscription{Endpoint: ep.String(), P256dh: out.Data.Keys.P256dh, Auth: out.Data.Keys.Auth}, out.Data.ClientHash
}

func (s *pushService) messages(clientHash string) []string {
	var out struct {
		Data struct {
			Messages []string `json:"messages"`
		} `json:"data"`
	}
	s.post("/get-notifications", map[string]string{"clientHash": clientHash}, &out)
	return out.Data.Messages
}

func (s *pushService) expire(clientHash string) { s.post("/expire-subscription/"+clientHash, nil, nil) }

func (s *pushService) post(path string, in, out any) {
	s.t.Helper()
	b := []byte("{}")
	if in != nil {
		b, _ = json.Marshal(in)
	}
	resp, err := http.Post(s.base+path, "application/json", bytes.NewReader(b))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("POST %s: %s", path, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			s.t.Fatalf("POST %s: %v", path, err)
		}
	}
}

func newProvider(t *testing.T) (*webpush.Provider, string) {
	return providerWith(t, webpush.Config{Subscriber: "mailto:test@herald.invalid", Urgency: "high", Now: time.Now})
}

func command(sub *schemas.WebPushSubscription) *schemas.DeliveryCommand {
	return &schemas.DeliveryCommand{
		DeliveryID: identity.DeliveryID(nid, "b1"), NotificationID: nid, Tenant: "acme", Type: "invoice.paid",
		Recipient: "u1", DeviceID: "b1", Channel: "webpush", WebPush: sub, CollapseID: nid,
		Title: "Paid", Body: "Invoice inv_2201 is paid", Payload: json.RawMessage(`{"url":"https://example.com/inv_2201"}`),
		ExpiresAt: time.Now().Add(time.Hour).UnixMilli(),
	}
}

func TestAPushArrivesDecryptsAndCarriesTheTopicHeader(t *testing.T) {
	s := startPushService(t)
	p, pub := newProvider(t)
	sub, hash := s.subscribe(pub)
	res := p.Send(context.Background(), command(sub))
	if res.Class != sinks.Success || res.Status != 201 {
		t.Fatalf("send: %v %q %d (%v), want a 201 success", res.Class, res.Rule, res.Status, res.Err)
	}
	got := s.messages(hash)
	if len(got) != 1 {
		t.Fatalf("the push service has %d messages, want 1", len(got))
	}
	var payload webpush.Payload
	if err := json.Unmarshal([]byte(got[0]), &payload); err != nil {
		t.Fatalf("decrypted payload %q: %v", got[0], err)
	}
	if want := (webpush.Payload{ID: nid, Title: "Paid", Body: "Invoice inv_2201 is paid", URL: "https://example.com/inv_2201", Type: "invoice.paid"}); payload != want {
		t.Fatalf("payload %+v, want %+v", payload, want)
	}
	topic, _ := identity.WebPushTopic(nid)
	h := s.headers[len(s.headers)-1]
	if h.Get("Topic") != topic || len(topic) != 22 || h.Get("Urgency") != "high" || h.Get("TTL") == "" || h.Get("TTL") == "0" {
		t.Fatalf("headers Topic %q Urgency %q TTL %q, want Topic %q, Urgency high and a TTL", h.Get("Topic"), h.Get("Urgency"), h.Get("TTL"), topic)
	}
}

func TestAnExpiredSubscriptionIsPermanentAndRetiresTheDevice(t *testing.T) {
	s := startPushService(t)
	p, pub := newProvider(t)
	sub, hash := s.subscribe(pub)
	s.expire(hash)
	res := p.Send(context.Background(), command(sub))
	if res.Class != sinks.Permanent || res.Rule != "expired_subscription" || !res.RetireDevice || res.Status != 410 {
		t.Fatalf("got %v %q retire %v status %d (%v), want permanent expired_subscription retiring the device on a 410", res.Class, res.Rule, res.RetireDevice, res.Status, res.Err)
	}
}

func TestEachWebPushStatusIsClassifiedAsThePackageTableSays(t *testing.T) {
	cases := []struct {
		name   string
		status int
		class  sinks.Class
		rule   string
		retire bool
	}{
		{"200 is a success", 200, sinks.Success, "accepted", false},
		{"201 is a success", 201, sinks.Success, "accepted", false},
		{"any 2xx (299) is a success", 299, sinks.Success, "accepted", false},
		{"a 3xx (300) is permanent", 300, sinks.Permanent, "http_4xx", false},
		{"404 is an expired subscription: permanent, retires the device", 404, sinks.Permanent, "expired_subscription", true},
		{"410 is an expired subscription: permanent, retires the device", 410, sinks.Permanent, "expired_subscription", true},
		{"413 is permanent and keeps the device", 413, sinks.Permanent, "payload_too_large", false},
		{"400 is permanent", 400, sinks.Permanent, "bad_request", false},
		{"401 (no VAPID) is permanent for the configuration", 401, sinks.Permanent, "auth", false},
		{"403 (VAPID) is permanent for the configuration", 403, sinks.Permanent, "auth", false},
		{"another 4xx (409) is permanent and keeps the device", 409, sinks.Permanent, "http_4xx", false},
		{"429 is retryable", 429, sinks.Retryable, "too_many_requests", false},
		{"500 is retryable", 500, sinks.Retryable, "server_error", false},
		{"503 is retryable", 503, sinks.Retryable, "server_error", false},
		{"any 5xx (504) is retryable", 504, sinks.Retryable, "server_error", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := webpush.Classify(tc.status)
			reason := http.StatusText(tc.status)
			if tc.class == sinks.Success {
				reason = ""
			}
			if r.Class != tc.class || r.Rule != tc.rule || r.RetireDevice != tc.retire || r.Status != tc.status || r.Reason != reason {
				t.Fatalf("Classify(%d) = %v %q retire %v status %d reason %q, want %v %q %v reason %q",
					tc.status, r.Class, r.Rule, r.RetireDevice, r.Status, r.Reason, tc.class, tc.rule, tc.retire, reason)
			}
		})
	}
}

func TestRetryAfterOfA429IsHonoured(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "9")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	p, _ := newProvider(t)
	// A browser's subscription keys (any valid P-256 point and 16 bytes).
	pub, _, _ := webpush.GenerateVAPIDKeys()
	res := p.Send(context.Background(), command(&schemas.WebPushSubscription{Endpoint: srv.URL + "/push/x", P256dh: pub, Auth: "AAAAAAAAAAAAAAAAAAAAAA"}))
	if res.Class != sinks.Retryable || res.RetryAfter != 9*time.Second {
		t.Fatalf("got %v retry-after %v (%v), want retryable after 9s", res.Class, res.RetryAfter, res.Err)
	}
}

func TestUnusableSubscriptionKeysRetireTheDeviceWithoutARequest(t *testing.T) {
	p, _ := newProvider(t)
	res := p.Send(context.Background(), command(&schemas.WebPushSubscription{Endpoint: "http://127.0.0.1:1/push", P256dh: "not-a-key", Auth: "x"}))
	if res.Class != sinks.Permanent || res.Rule != "bad_subscription" || !res.RetireDevice {
		t.Fatalf("got %v %q retire %v (%v), want permanent bad_subscription retiring the device", res.Class, res.Rule, res.RetireDevice, res.Err)
	}
}
