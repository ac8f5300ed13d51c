package fcm_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/fcm"
	"github.com/heraldhq/herald/sinks/fcm/emulator"
)

const nid = "52f364d9288c640b306b566e509104bd"

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func command(token string) *schemas.DeliveryCommand {
	return &schemas.DeliveryCommand{
		DeliveryID: identity.DeliveryID(nid, "d1"), NotificationID: nid, Tenant: "acme", Type: "invoice.paid",
		Recipient: "u1", DeviceID: "d1", Channel: "fcm", Token: token, CollapseID: nid,
		Title: "Paid", Body: "Invoice inv_2201 is paid", ExpiresAt: now.Add(time.Hour).UnixMilli(),
	}
}

func start(t *testing.T) (*emulator.Emulator, *fcm.Provider) {
	t.Helper()
	em, err := emulator.Start(emulator.Options{ProjectID: "herald-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	p, err := fcm.New(context.Background(), fcm.Config{Endpoint: em.URL() + "/v1", CredentialsJSON: em.ServiceAccountJSON(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.CloseIdleConnections)
	return em, p
}

func send(p *fcm.Provider, cmd *schemas.DeliveryCommand) sinks.Result {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return p.Send(ctx, cmd)
}

func TestEachFCMAnswerIsClassifiedAsThePackageTableSays(t *testing.T) {
	em, p := start(t)
	cases := []struct {
		name   string
		rule   emulator.Rule // scripted for the case's token; zero: the token decides
		token  string        // "" : a valid token of the case's own
		title  string
		class  sinks.Class
		rule_  string
		reason string
		retire bool
		after  time.Duration
	}{
		{name: "200 is a success", class: sinks.Success, rule_: "accepted"},
		{name: "UNREGISTERED is permanent and retires the device", rule: emulator.Rule{Reason: "UNREGISTERED"}, class: sinks.Permanent, rule_: "unregistered", reason: "UNREGISTERED", retire: true},
		{name: "INVALID_ARGUMENT for a malformed registration token is permanent and retires the device", token: "not a token", class: sinks.Permanent, rule_: "bad_token", reason: "INVALID_ARGUMENT", retire: true},
		{name: "INVALID_ARGUMENT for a message too big is permanent and keeps the device", title: strings.Repeat("x", 5000), class: sinks.Permanent, rule_: "invalid_argument", reason: "INVALID_ARGUMENT"},
		{name: "SENDER_ID_MISMATCH is permanent for the configuration", rule: emulator.Rule{Reason: "SENDER_ID_MISMATCH"}, class: sinks.Permanent, rule_: "sender_id_mismatch", reason: "SENDER_ID_MISMATCH"},
		{name: "THIRD_PARTY_AUTH_ERROR is permanent for the configuration", rule: emulator.Rule{Reason: "THIRD_PARTY_AUTH_ERROR"}, class: sinks.Permanent, rule_: "third_party_auth", reason: "THIRD_PARTY_AUTH_ERROR"},
		{name: "QUOTA_EXCEEDED is retryable with its Retry-After", rule: emulator.Rule{Reason: "QUOTA_EXCEEDED", RetryAfter: 7 * time.Second}, class: sinks.Retryable, rule_: "quota_exceeded", reason: "QUOTA_EXCEEDED", after: 7 * time.Second},
		{name: "UNAVAILABLE is retryable with its Retry-After", rule: emulator.Rule{Reason: "UNAVAILABLE", RetryAfter: 3 * time.Second}, class: sinks.Retryable, rule_: "unavailable", reason: "UNAVAILABLE", after: 3 * time.Second},
		{name: "INTERNAL is retryable", rule: emulator.Rule{Reason: "INTERNAL", RetryAfter: time.Second}, class: sinks.Retryable, rule_: "internal", reason: "INTERNAL", after: time.Second},
		{name: "a reset after the request was read is ambiguous", rule: emulator.Rule{Reset: true}, class: sinks.Ambiguous, rule_: "no_answer"},
		{name: "an answer slower than the call's deadline is ambiguous", rule: emulator.Rule{Delay: time.Hour}, class: sinks.Ambiguous, rule_: "no_answer"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			token := tc.token
			if token == "" {
				token = "fcm-token-" + strconv.Itoa(i)
			}
			if tc.rule != (emulator.Rule{}) {
				tc.rule.Token, tc.rule.Times = token, 1
				em.AddRule(tc.rule)
			}
			cmd := command(token)
			if tc.title != "" {
				cmd.Title = tc.title
			}
			res := send(p, cmd)
			if res.Class != tc.class || res.Rule != tc.rule_ || res.Reason != tc.reason || res.RetireDevice != tc.retire || res.RetryAfter != tc.after {
				t.Fatalf("got class %v rule %q reason %q retire %v retry-after %v (err %v), want %v %q %q %v %v",
					res.Class, res.Rule, res.Reason, res.RetireDevice, res.RetryAfter, res.Err, tc.class, tc.rule_, tc.reason, tc.retire, tc.after)
			}
			if tc.class == sinks.Success && !strings.HasPrefix(res.MessageID, "projects/herald-test/messages/") {
				t.Fatalf("message id %q, want FCM's message name", res.MessageID)
			}
		})
	}
}

func TestTheSDKMakesOneRequestPerAttempt(t *testing.T) {
	cases := []struct {
		name  string
		rule  emulator.Rule
		class sinks.Class
	}{
		{"a 503 without Retry-After (the SDK would retry it at once)", emulator.Rule{Reason: "UNAVAILABLE"}, sinks.Retryable},
		{"a 503 with Retry-After", emulator.Rule{Reason: "UNAVAILABLE", RetryAfter: time.Second}, sinks.Retryable},
		{"a reset (the SDK would retry a network error)", emulator.Rule{Reset: true}, sinks.Ambiguous},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			em, p := start(t)
			tc.rule.Token = "fcm-token-503" // every request for it, not only the first
			em.AddRule(tc.rule)
			if res := send(p, command("fcm-token-503")); res.Class != tc.class {
				t.Fatalf("class %v (%v), want %v", res.Class, res.Err, tc.class)
			}
			if n := em.Total(); n != 1 {
				t.Fatalf("the emulator read %d requests for one attempt, want 1", n)
			}
		})
	}
}

func TestEveryAttemptCarriesTheNotificationsIdsAndTTL(t *testing.T) {
	em, p := start(t)
	cmd := command("fcm-token-ids")
	for range 2 {
		if res := send(p, cmd); res.Class != sinks.Success {
			t.Fatalf("send: %v %v", res.Class, res.Err)
		}
	}
	got := em.Received()
	if len(got) != 2 {
		t.Fatalf("emulator read %d messages, want 2", len(got))
	}
	for _, m := range got {
		m.At = time.Time{}
		want := emulator.Message{Token: "fcm-token-ids", NotificationID: nid, DeliveryID: cmd.DeliveryID, CollapseKey: nid,
			APNsCollapseID: nid, TTL: "3600s", Priority: "high", Title: "Paid", Body: cmd.Body, Answer: "200"}
		if m != want {
			t.Fatalf("message\n%+v\nwant\n%+v", m, want)
		}
	}
	if n := em.TokensIssued(); n != 1 {
		t.Fatalf("%d access tokens fetched for two sends, want 1 (cached)", n)
	}
}

func TestACallThatNeverReachedFCMIsRetryable(t *testing.T) {
	em, _ := start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	p, err := fcm.New(context.Background(), fcm.Config{Endpoint: "http://" + addr + "/v1", CredentialsJSON: em.ServiceAccountJSON()})
	if err != nil {
		t.Fatal(err)
	}
	if res := send(p, command("fcm-token")); res.Class != sinks.Retryable || res.Rule != "not_sent" {
		t.Fatalf("got %v %q (%v), want retryable not_sent", res.Class, res.Rule, res.Err)
	}
}

func TestAKeyTheTokenEndpointRefusesIsPermanent(t *testing.T) {
	em, _ := start(t)
	other, err := emulator.Start(emulator.Options{ProjectID: "herald-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// The other emulator's key, with this emulator's token endpoint: the
	// signature does not verify.
	key := strings.Replace(string(other.ServiceAccountJSON()), other.URL(), em.URL(), -1)
	key = strings.Replace(key, "herald-dev@", "herald-dev@", 1)
	p, err := fcm.New(context.Background(), fcm.Config{Endpoint: em.URL() + "/v1", CredentialsJSON: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	res := send(p, command("fcm-token"))
	if res.Class != sinks.Permanent || res.Rule != "auth" || res.Reason != "invalid_grant" {
		t.Fatalf("got %v %q %q (%v), want permanent auth invalid_grant", res.Class, res.Rule, res.Reason, res.Err)
	}
	if em.Total() != 0 {
		t.Fatalf("the emulator read %d messages without a token", em.Total())
	}
}

func TestTheEmulatorRequiresAnAccessToken(t *testing.T) {
	em, _ := start(t)
	res := fcm.Classify(401, nil)
	if res.Class != sinks.Permanent || res.Rule != "auth" {
		t.Fatalf("a bare 401 is %v %q, want permanent auth", res.Class, res.Rule)
	}
	resp, err := httpPost(em.URL()+"/v1/projects/herald-test/messages:send", `{"message":{"token":"fcm-token-x"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if resp != 401 {
		t.Fatalf("a send without a bearer token got %d, want 401", resp)
	}
}
