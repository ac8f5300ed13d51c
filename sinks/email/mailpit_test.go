package email_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/email"
)

// TestTheEmailSinkDeliversToMailpit: the adapter submits to mailpit, a real
// SMTP server nobody here wrote, and its API reads the message back: our
// Message-ID, the notification id header, List-Unsubscribe with RFC 8058's
// one-click, both parts with the HTML escaped. A retry of the same
// delivery is the same message, which mailpit (like Gmail) drops by its
// Message-ID: the mailbox holds one.
func TestTheEmailSinkDeliversToMailpit(t *testing.T) {
	mp := testenv.StartMailpit(t, "--ignore-duplicate-ids")
	host, port, _ := net.SplitHostPort(mp.SMTP)
	var n int
	fmt.Sscan(port, &n)
	p, err := email.New(email.Config{Host: host, Port: n, TLS: email.TLSNone, From: "Herald <no-reply@herald.test>",
		UnsubscribeURL: "https://prefs.example.com/unsubscribe?user={recipient}"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	cmd := command("ada@example.com")
	cmd.Body = `Paid <b>in full</b> & on time`
	for attempt := 1; attempt <= 2; attempt++ {
		if res := send(p, cmd, 10*time.Second); res.Class != sinks.Success {
			t.Fatalf("attempt %d: %s %s %v", attempt, res.Class, res.Rule, res.Err)
		}
	}

	var list struct {
		Total    int `json:"total"`
		Messages []struct {
			ID        string `json:"ID"`
			MessageID string `json:"MessageID"`
			Subject   string `json:"Subject"`
			To        []struct {
				Address string `json:"Address"`
			} `json:"To"`
		} `json:"messages"`
	}
	getJSON(t, mp.API+"/api/v1/messages", &list)
	if list.Total != 1 || len(list.Messages) != 1 {
		t.Fatalf("mailpit holds %d messages, want 1 (the retry is the same message): %+v", list.Total, list)
	}
	m := list.Messages[0]
	if want := email.MessageID(cmd.DeliveryID, "herald.test"); m.MessageID != want {
		t.Errorf("Message-ID %q, want %q", m.MessageID, want)
	}
	if m.Subject != cmd.Title || len(m.To) != 1 || m.To[0].Address != "ada@example.com" {
		t.Errorf("subject %q to %+v, want %q to ada@example.com", m.Subject, m.To, cmd.Title)
	}
	var msg struct {
		Text, HTML string
	}
	getJSON(t, mp.API+"/api/v1/message/"+m.ID, &msg)
	if !strings.Contains(msg.Text, cmd.Body) {
		t.Errorf("text part %q lacks the body as written", msg.Text)
	}
	if !strings.Contains(msg.HTML, "Paid &lt;b&gt;in full&lt;/b&gt; &amp; on time") {
		t.Errorf("HTML part %q lacks the escaped body", msg.HTML)
	}
	var headers map[string][]string
	getJSON(t, mp.API+"/api/v1/message/"+m.ID+"/headers", &headers)
	for name, want := range map[string]string{
		"X-Herald-Notification-Id": cmd.NotificationID,
		"List-Unsubscribe":         "<https://prefs.example.com/unsubscribe?user=u1>",
		"List-Unsubscribe-Post":    "List-Unsubscribe=One-Click",
	} {
		if got := headers[name]; len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
