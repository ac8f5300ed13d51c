package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/chdb"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sdk"
)

// TestDevSendsAFallbackChainsNextStepAndShowsItInTheTimeline: herald dev
// with a fallback chain (HERALD_FALLBACK_CHAINS, as every role reads it)
// runs the fallback stage: a user with an iPhone and an address gets the
// push, then, two seconds later with no opened receipt, one email; the
// notification's timeline (GET /v1/notifications/{id}, from the audit)
// shows the step's decision, stage fallback, with its reason; and
// `herald replay --stage route` replays the fallback stage's decisions
// beside the route stage's, finding them as the live stages made them.
func TestDevSendsAFallbackChainsNextStepAndShowsItInTheTimeline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts herald dev with the chDB server; runs in the full suite")
	}
	if _, err := chdb.FindLib(); err != nil {
		t.Fatalf("chDB engine missing (scripts/install installs it): %v", err)
	}
	bin := testenv.Herald(t)
	smtpHTTP := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	t.Setenv("HERALD_EMAIL_EMULATOR_HTTP_ADDR", smtpHTTP)
	t.Setenv("HERALD_FALLBACK_CHAINS", "welcome=push > email after 2s unless opened")
	kafkaPort, httpPort, chTCP, chHTTP := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	dev := startDev(t, bin, t.TempDir(), kafkaPort, httpPort, chTCP, chHTTP)

	for path, body := range map[string]string{"/v1/users/u_fb/devices/iphone": `{"platform":"ios","token":"abc123"}`,
		"/v1/users/u_fb/devices/inbox": `{"email":"fb@example.com"}`} {
		if st, b := dev.call(t, "PUT", path, body); st != 201 {
			t.Fatalf("PUT %s: %d %s", path, st, b)
		}
	}
	type message struct {
		To      []string          `json:"to"`
		Headers map[string]string `json:"headers"`
	}
	mails := func() []message {
		var got struct {
			Messages []message `json:"messages"`
		}
		resp, err := http.Get("http://" + smtpHTTP + "/emulator/messages")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&got)
		return got.Messages
	}
	// The route stage reads herald.devices a moment after the API wrote
	// it: send (each with its own dedupe key) until one is emailed.
	deadline := time.Now().Add(2 * time.Minute)
	var sent []string
	var emailed string
	for i := 0; emailed == ""; i++ {
		st, b := dev.call(t, "POST", "/v1/notifications", fmt.Sprintf(`{"type":"welcome","recipients":["u_fb"],"title":"Welcome","body":"b","dedupeKey":"fb-%d"}`, i))
		if st != 202 {
			t.Fatalf("POST /v1/notifications: %d %s", st, b)
		}
		var ack sdk.SendResult
		if err := json.Unmarshal([]byte(b), &ack); err != nil || len(ack.Notifications) != 1 {
			t.Fatalf("POST /v1/notifications answered %s (%v)", b, err)
		}
		sent = append(sent, ack.Notifications[0].ID)
		time.Sleep(4 * time.Second)
		for _, m := range mails() {
			if id := m.Headers["X-Herald-Notification-Id"]; slices.Contains(sent, id) && len(m.To) == 1 && m.To[0] == "fb@example.com" {
				emailed = id
			}
		}
		if emailed == "" && time.Now().After(deadline) {
			t.Fatalf("no email after %d sends; dev log %s", len(sent), dev.log)
		}
	}
	n := 0
	for _, m := range mails() {
		if m.Headers["X-Herald-Notification-Id"] == emailed {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d emails of notification %s, want 1", n, emailed)
	}
	for {
		st, b := dev.call(t, "GET", "/v1/notifications/"+emailed, "")
		var rec sdk.NotificationRecord
		if st == 200 && json.Unmarshal([]byte(b), &rec) == nil && slices.ContainsFunc(rec.Timeline, func(e sdk.TimelineEvent) bool {
			return e.Stage == "fallback" && e.Outcome == "fallback" && strings.Contains(e.Detail, "step 2 (email after 2s unless opened) fired: 2s passed since step 1")
		}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the timeline of %s lacks the fallback step's decision: %d %s", emailed, st, b)
		}
		time.Sleep(time.Second)
	}

	// The replay reads what the live stages have committed: the step's
	// decision is there (the timeline read it from the audit).
	out, err := exec.Command(bin, "replay", "--stage", "route", "--brokers", fmt.Sprintf("127.0.0.1:%d", kafkaPort),
		"--clickhouse-addr", fmt.Sprintf("127.0.0.1:%d", chTCP)).CombinedOutput()
	if err != nil {
		t.Fatalf("herald replay --stage route: %v\n%s", err, out)
	}
	for _, want := range []string{"through the route stage, compared", "record(s) of herald.fallback through the fallback stage, compared"} {
		if !strings.Contains(string(out), want) || strings.Count(string(out), ": 0 difference(s)") != 2 {
			t.Fatalf("herald replay --stage route printed\n%s\nwant %q and no difference in either stage", out, want)
		}
	}
	if m := regexp.MustCompile(`compared (\d+) step decision`).FindStringSubmatch(string(out)); m == nil || m[1] == "0" {
		t.Fatalf("herald replay --stage route compared no fallback step:\n%s", out)
	}
}
