package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/chdb"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sdk"
)

// TestDevEmailsARegisteredAddressThroughItsSMTPEmulator: in herald dev,
// an address registered through the API ({"email": …}) gets a
// notification that asks for email as one email, in the local SMTP
// emulator herald dev starts by default, with the notification id in its
// header: API, dedupe, route (platform email → the email channel) and
// the email sink, end to end.
func TestDevEmailsARegisteredAddressThroughItsSMTPEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("starts herald dev with the chDB server; runs in the full suite")
	}
	if _, err := chdb.FindLib(); err != nil {
		t.Fatalf("chDB engine missing (scripts/install installs it): %v", err)
	}
	bin := testenv.Herald(t)
	smtpHTTP := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	t.Setenv("HERALD_EMAIL_EMULATOR_HTTP_ADDR", smtpHTTP)
	kafkaPort, httpPort, chTCP, chHTTP := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	dev := startDev(t, bin, t.TempDir(), kafkaPort, httpPort, chTCP, chHTTP)

	if st, b := dev.call(t, "PUT", "/v1/users/u_mail/devices/inbox", `{"email":"ada@example.com"}`); st != 201 {
		t.Fatalf("PUT the address: %d %s", st, b)
	}
	// The route stage reads herald.devices a moment after the API wrote
	// it: a notification decided before that has no target. Send until
	// one is emailed; each send has its own dedupe key.
	deadline := time.Now().Add(2 * time.Minute)
	var sent []string
	for i := 0; ; i++ {
		st, b := dev.call(t, "POST", "/v1/notifications", fmt.Sprintf(`{"type":"welcome","recipients":["u_mail"],"title":"Hello <ada>","body":"from herald dev","channels":["email"],"dedupeKey":"mail-%d"}`, i))
		if st != 202 && st != 200 && st != 201 {
			t.Fatalf("POST /v1/notifications: %d %s", st, b)
		}
		var ack sdk.SendResult
		if err := json.Unmarshal([]byte(b), &ack); err != nil || len(ack.Notifications) != 1 {
			t.Fatalf("POST /v1/notifications answered %s (%v)", b, err)
		}
		sent = append(sent, ack.Notifications[0].ID)
		time.Sleep(time.Second)
		var got struct {
			Messages []struct {
				To      []string          `json:"to"`
				Subject string            `json:"subject"`
				Headers map[string]string `json:"headers"`
			} `json:"messages"`
		}
		resp, err := http.Get("http://" + smtpHTTP + "/emulator/messages")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if len(got.Messages) > 0 {
			m := got.Messages[0]
			if len(m.To) != 1 || m.To[0] != "ada@example.com" || m.Subject != "Hello <ada>" || !slices.Contains(sent, m.Headers["X-Herald-Notification-Id"]) {
				t.Fatalf("the emulator kept %+v, want an email to ada@example.com of one of %v", m, sent)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no email after %d sends; dev log %s", len(sent), dev.log)
		}
	}
}
