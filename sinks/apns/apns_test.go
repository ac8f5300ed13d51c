package apns_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns"
	"github.com/heraldhq/herald/sinks/apns/emulator"
)

func command(token string) *schemas.DeliveryCommand {
	nid := "52f364d9288c640b306b566e509104bd"
	return &schemas.DeliveryCommand{
		DeliveryID: identity.DeliveryID(nid, "d1"), NotificationID: nid, Tenant: "acme", Type: "invoice.paid",
		Recipient: "u1", DeviceID: "d1", Channel: "apns", Token: token, CollapseID: nid, APNsID: identity.APNsID(nid),
		Title: "Paid", Body: "Invoice inv_2201 is paid", ExpiresAt: time.Now().Add(time.Hour).UnixMilli(),
	}
}

func start(t *testing.T) (*emulator.Emulator, *apns.Provider) {
	t.Helper()
	em := startEmulator(t, emulator.Options{})
	return em, provider(t, em, apns.Config{})
}

func startEmulator(t *testing.T, o emulator.Options) *emulator.Emulator {
	t.Helper()
	em, err := emulator.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	return em
}

// provider is an adapter with cfg's settings that sends to em for the app
// com.example.app.
func provider(t *testing.T, em *emulator.Emulator, cfg apns.Config) *apns.Provider {
	t.Helper()
	cfg.Host, cfg.RootCAs, cfg.Topic = em.URL(), em.RootCAs(), "com.example.app"
	p, err := apns.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.CloseIdleConnections)
	return p
}

func TestEachAPNsAnswerIsClassifiedAsThePackageTableSays(t *testing.T) {
	em, p := start(t)
	cases := []struct {
		name   string
		rule   emulator.Rule
		class  sinks.Class
		rule_  string
		retire bool
		after  time.Duration
	}{
		{"200 is a success", emulator.Rule{Status: 200}, sinks.Success, "accepted", false, 0},
		{"400 BadDeviceToken is permanent and retires the device", emulator.Rule{Status: 400, Reason: "BadDeviceToken"}, sinks.Permanent, "bad_device_token", true, 0},
		{"400 PayloadEmpty is permanent", emulator.Rule{Status: 400, Reason: "PayloadEmpty"}, sinks.Permanent, "bad_request", false, 0},
		{"403 ExpiredProviderToken is permanent", emulator.Rule{Status: 403, Reason: "ExpiredProviderToken"}, sinks.Permanent, "auth", false, 0},
		{"410 Unregistered is permanent and retires the device", emulator.Rule{Status: 410, Reason: "Unregistered"}, sinks.Permanent, "unregistered", true, 0},
		{"413 PayloadTooLarge is permanent", emulator.Rule{Status: 413, Reason: "PayloadTooLarge"}, sinks.Permanent, "payload_too_large", false, 0},
		{"429 TooManyRequests is retryable with its Retry-After", emulator.Rule{Status: 429, Reason: "TooManyRequests", RetryAfter: 7 * time.Second}, sinks.Retryable, "too_many_requests", false, 7 * time.Second},
		{"500 is retryable", emulator.Rule{Status: 500, Reason: "InternalServerError"}, sinks.Retryable, "server_error", false, 0},
		{"503 is retryable", emulator.Rule{Status: 503, Reason: "ServiceUnavailable"}, sinks.Retryable, "unavailable", false, 0},
		{"a reset after the request was read is ambiguous", emulator.Rule{Reset: true}, sinks.Ambiguous, "no_answer", false, 0},
		{"an answer slower than the call's deadline is ambiguous", emulator.Rule{Delay: time.Hour}, sinks.Ambiguous, "no_answer", false, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			token := "tok" + strconv.Itoa(i)
			tc.rule.Token, tc.rule.Times = token, 1
			em.AddRule(tc.rule)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			res := p.Send(ctx, command(token))
			if res.Class != tc.class || res.Rule != tc.rule_ || res.RetireDevice != tc.retire || res.RetryAfter != tc.after {
				t.Fatalf("got class %v rule %q retire %v retry-after %v (err %v), want %v %q %v %v",
					res.Class, res.Rule, res.RetireDevice, res.RetryAfter, res.Err, tc.class, tc.rule_, tc.retire, tc.after)
			}
			if tc.rule.Status != 0 && res.Status != tc.rule.Status {
				t.Fatalf("status %d, want %d", res.Status, tc.rule.Status)
			}
		})
	}
}

func TestACallThatNeverReachedAPNsIsRetryable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	p, err := apns.New(apns.Config{Host: "https://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Send(context.Background(), command("tok"))
	if res.Class != sinks.Retryable || res.Rule != "not_sent" {
		t.Fatalf("got %v %q (%v), want retryable not_sent", res.Class, res.Rule, res.Err)
	}
}

func TestEveryAttemptCarriesTheNotificationsIdsOverHTTP2(t *testing.T) {
	em, p := start(t)
	cmd := command("tok-ids")
	for range 2 {
		if res := p.Send(context.Background(), cmd); res.Class != sinks.Success {
			t.Fatalf("send: %v %v", res.Class, res.Err)
		}
	}
	got := em.Received()
	if len(got) != 2 {
		t.Fatalf("emulator read %d pushes, want 2", len(got))
	}
	for _, push := range got {
		want := emulator.Push{
			Token: "tok-ids", APNsID: identity.APNsID(cmd.NotificationID), CollapseID: cmd.NotificationID,
			PushType: "alert", Topic: "com.example.app", Priority: "10", Expiration: strconv.FormatInt(cmd.ExpiresAt/1000, 10),
			NotificationID: cmd.NotificationID, DeliveryID: cmd.DeliveryID, Title: "Paid", Answer: "200",
		}
		push.At = time.Time{}
		if push != want {
			t.Fatalf("push\n%+v\nwant\n%+v", push, want)
		}
	}
}

func TestTheEmulatorAnswersLikeAPNs(t *testing.T) {
	em, _ := start(t)
	cl := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: tlsConfig(em)}}
	cases := []struct {
		name, method, path, apnsID string
		status                     int
		proto                      string
	}{
		{"a push is accepted over HTTP/2", "POST", "/3/device/abc", "", 200, "HTTP/2.0"},
		{"a GET is not allowed", "GET", "/3/device/abc", "", 405, "HTTP/2.0"},
		{"another path is BadPath", "POST", "/2/device/abc", "", 404, "HTTP/2.0"},
		{"a malformed apns-id is BadMessageId", "POST", "/3/device/abc", "not-a-uuid", 400, "HTTP/2.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, em.URL()+tc.path, stringsReader(`{"aps":{}}`))
			if tc.apnsID != "" {
				req.Header.Set("apns-id", tc.apnsID)
			}
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Proto != tc.proto {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, resp.Proto, tc.status, tc.proto)
			}
		})
	}
}

func TestClassifyFollowsThePackageTableForEveryStatusAndReason(t *testing.T) {
	cases := []struct {
		name   string
		status int
		reason string
		class  sinks.Class
		rule   string
		retire bool
	}{
		{"200 is accepted", 200, "", sinks.Success, "accepted", false},
		{"400 BadDeviceToken retires the device", 400, "BadDeviceToken", sinks.Permanent, "bad_device_token", true},
		{"400 DeviceTokenNotForTopic retires the device", 400, "DeviceTokenNotForTopic", sinks.Permanent, "bad_device_token", true},
		{"400 BadCollapseId is a bad request that keeps the device", 400, "BadCollapseId", sinks.Permanent, "bad_request", false},
		{"403 InvalidProviderToken is an auth error", 403, "InvalidProviderToken", sinks.Permanent, "auth", false},
		{"403 BadCertificate is an auth error", 403, "BadCertificate", sinks.Permanent, "auth", false},
		{"404 BadPath is a bad request", 404, "BadPath", sinks.Permanent, "bad_request", false},
		{"405 MethodNotAllowed is a bad request", 405, "MethodNotAllowed", sinks.Permanent, "bad_request", false},
		{"410 ExpiredToken retires the device", 410, "ExpiredToken", sinks.Permanent, "unregistered", true},
		{"413 PayloadTooLarge keeps the device", 413, "PayloadTooLarge", sinks.Permanent, "payload_too_large", false},
		{"a PayloadTooLarge reason under another status is payload_too_large", 400, "PayloadTooLarge", sinks.Permanent, "payload_too_large", false},
		{"429 TooManyProviderTokenUpdates is retryable", 429, "TooManyProviderTokenUpdates", sinks.Retryable, "too_many_requests", false},
		{"500 InternalServerError is retryable", 500, "InternalServerError", sinks.Retryable, "server_error", false},
		{"503 Shutdown is retryable", 503, "Shutdown", sinks.Retryable, "unavailable", false},
		{"another 5xx (502) is retryable", 502, "", sinks.Retryable, "http_5xx", false},
		{"another 5xx (504) is retryable", 504, "", sinks.Retryable, "http_5xx", false},
		{"another 4xx (418) is permanent", 418, "", sinks.Permanent, "http_4xx", false},
		{"a 499 is permanent", 499, "", sinks.Permanent, "http_4xx", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := apns.Classify(tc.status, tc.reason)
			if r.Class != tc.class || r.Rule != tc.rule || r.RetireDevice != tc.retire || r.Status != tc.status || r.Reason != tc.reason {
				t.Fatalf("Classify(%d, %q) = %v %q retire %v status %d reason %q, want %v %q retire %v",
					tc.status, tc.reason, r.Class, r.Rule, r.RetireDevice, r.Status, r.Reason, tc.class, tc.rule, tc.retire)
			}
		})
	}
}
