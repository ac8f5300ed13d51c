package email_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/email"
	"github.com/heraldhq/herald/sinks/email/emulator"
)

var nid = identity.DedupeID("acme", "invoice.paid", "u1", "inv_1")

func command(addr string) *schemas.DeliveryCommand {
	return &schemas.DeliveryCommand{DeliveryID: identity.DeliveryID(nid, "mail"), NotificationID: nid, Tenant: "acme", Type: "invoice.paid",
		Recipient: "u1", DeviceID: "mail", Channel: email.Channel, Token: addr, CollapseID: nid, Title: "Invoice paid", Body: "Thanks!",
		CreatedAt: time.Now().UnixMilli(), ExpiresAt: time.Now().Add(time.Hour).UnixMilli()}
}

func startEmulator(t *testing.T, o emulator.Options) *emulator.Emulator {
	t.Helper()
	e, err := emulator.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// newProvider is an adapter for the emulator (no TLS unless c says so).
func newProvider(t *testing.T, e *emulator.Emulator, c email.Config) *email.Provider {
	t.Helper()
	host, port, _ := net.SplitHostPort(e.Addr())
	c.Host = host
	fmt.Sscan(port, &c.Port)
	if c.TLS == "" {
		c.TLS = email.TLSNone
	}
	if c.From == "" {
		c.From = "Herald <no-reply@herald.test>"
	}
	p, err := email.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func send(p *email.Provider, cmd *schemas.DeliveryCommand, timeout time.Duration) sinks.Result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.Send(ctx, cmd)
}

// TestAnEmailCarriesItsIdsEscapedContentAndUnsubscribeHeaders: the
// Message-ID is the delivery id's, the notification id is in a header,
// the HTML part escapes the title, body and payload, the type's own
// template is used, and List-Unsubscribe (with RFC 8058's one-click
// header) points at the recipient's preferences.
func TestAnEmailCarriesItsIdsEscapedContentAndUnsubscribeHeaders(t *testing.T) {
	e := startEmulator(t, emulator.Options{})
	p := newProvider(t, e, email.Config{
		UnsubscribeURL: "https://prefs.example.com/u?tenant={tenant}&user={recipient}&type={type}",
		Templates: map[string]email.Template{"invoice.paid": {
			Subject: "Paid: {{.Payload.invoice}}",
			HTML:    `<p>{{.Title}}</p><p>{{.Payload.invoice}} for {{.Payload.amount}}</p><a href="{{.URL}}">see</a>`,
		}},
	})
	cmd := command("ada@example.com")
	cmd.Title, cmd.Recipient = `<script>alert("x")</script>`, "u 1&2"
	cmd.Payload = json.RawMessage(`{"invoice":"<inv_1>","amount":12.50,"url":"javascript:alert(1)"}`)
	if res := send(p, cmd, 5*time.Second); res.Class != sinks.Success || res.Rule != "accepted" {
		t.Fatalf("result %+v, want success", res)
	}
	box := e.Mailbox("ada@example.com")
	if len(box) != 1 {
		t.Fatalf("mailbox %+v, want one message", box)
	}
	m := box[0]
	checks := []struct{ name, got, want string }{
		{"Message-ID", m.MessageID, "<" + cmd.DeliveryID + "@herald.test>"},
		{"X-Herald-Notification-Id", m.Headers["X-Herald-Notification-Id"], nid},
		{"List-Unsubscribe", m.Headers["List-Unsubscribe"], "<https://prefs.example.com/u?tenant=acme&user=u+1%262&type=invoice.paid>"},
		{"List-Unsubscribe-Post", m.Headers["List-Unsubscribe-Post"], "List-Unsubscribe=One-Click"},
		{"Subject (the type's template)", m.Subject, "Paid: <inv_1>"},
		{"From", m.Headers["From"], `"Herald" <no-reply@herald.test>`},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	for _, bad := range []string{"<script>", "<inv_1>", "javascript:"} {
		if strings.Contains(m.HTML, bad) {
			t.Errorf("the HTML part has %q unescaped: %s", bad, m.HTML)
		}
	}
	if !strings.Contains(m.HTML, "&lt;inv_1&gt; for 12.50") {
		t.Errorf("the HTML part %q lacks the escaped payload with its number as written", m.HTML)
	}
	if !strings.Contains(m.Text, "Thanks!") || !strings.Contains(m.Text, "https://prefs.example.com/u?") {
		t.Errorf("the text part %q lacks the body or the unsubscribe link (the default text template)", m.Text)
	}
}

// TestAnHTTPUnsubscribeURLGetsNoOneClickHeader: RFC 8058 one-click needs
// HTTPS.
func TestAnHTTPUnsubscribeURLGetsNoOneClickHeader(t *testing.T) {
	e := startEmulator(t, emulator.Options{})
	p := newProvider(t, e, email.Config{UnsubscribeURL: "http://localhost:8080/prefs/{recipient}"})
	if res := send(p, command("ada@example.com"), 5*time.Second); res.Class != sinks.Success {
		t.Fatalf("result %+v", res)
	}
	m := e.Mailbox("ada@example.com")[0]
	if m.Headers["List-Unsubscribe"] != "<http://localhost:8080/prefs/u1>" || m.Headers["List-Unsubscribe-Post"] != "" {
		t.Fatalf("headers %v, want List-Unsubscribe and no List-Unsubscribe-Post", m.Headers)
	}
}

// TestEachAnswerOfTheServerIsClassifiedAsTheTableSays: through the
// emulator's scripted faults, one send each.
func TestEachAnswerOfTheServerIsClassifiedAsTheTableSays(t *testing.T) {
	rows := []struct {
		name   string
		rule   emulator.Rule
		class  sinks.Class
		rrule  string
		retire bool
		kept   bool
	}{
		{"a 550 to RCPT retires the address", emulator.Rule{Code: 550, Enhanced: "5.1.1"}, sinks.Permanent, "mailbox_unavailable", true, false},
		{"a 550 5.7.1 to RCPT keeps it", emulator.Rule{Code: 550, Enhanced: "5.7.1"}, sinks.Permanent, "recipient_refused", false, false},
		{"a 451 to RCPT is retried", emulator.Rule{Code: 451, Enhanced: "4.7.1"}, sinks.Retryable, "deferred", false, false},
		{"a final 554 is permanent", emulator.Rule{Code: 554, Enhanced: "5.7.1", At: emulator.AtData}, sinks.Permanent, "message_refused", false, false},
		{"a final 452 is retried", emulator.Rule{Code: 452, Enhanced: "4.3.1", At: emulator.AtData}, sinks.Retryable, "deferred", false, false},
		{"a cut after the end of data is ambiguous, and the server has the message", emulator.Rule{Cut: true}, sinks.Ambiguous, "no_final_reply", false, true},
		{"a final reply after the deadline is ambiguous, and the server has the message", emulator.Rule{Delay: 3 * time.Second}, sinks.Ambiguous, "no_final_reply", false, true},
	}
	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			e := startEmulator(t, emulator.Options{})
			p := newProvider(t, e, email.Config{})
			addr := fmt.Sprintf("user%d@example.com", i)
			r.rule.Address = addr
			e.AddRule(r.rule)
			res := send(p, command(addr), time.Second)
			if res.Class != r.class || res.Rule != r.rrule || res.RetireDevice != r.retire {
				t.Fatalf("result %s %s retire=%v (%v), want %s %s retire=%v", res.Class, res.Rule, res.RetireDevice, res.Err, r.class, r.rrule, r.retire)
			}
			if kept := len(e.Mailbox(addr)) == 1; kept != r.kept {
				t.Fatalf("the server kept the message: %v, want %v", kept, r.kept)
			}
		})
	}
	t.Run("a server that refuses connections is retried: nothing was sent", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		host, port, _ := net.SplitHostPort(addr)
		var n int
		fmt.Sscan(port, &n)
		p, err := email.New(email.Config{Host: host, Port: n, TLS: email.TLSNone, From: "no-reply@herald.test"})
		if err != nil {
			t.Fatal(err)
		}
		if res := send(p, command("ada@example.com"), time.Second); res.Class != sinks.Retryable || res.Rule != "not_sent" {
			t.Fatalf("result %s %s (%v), want retryable not_sent", res.Class, res.Rule, res.Err)
		}
	})
	t.Run("an address that is no address retires it without a connection", func(t *testing.T) {
		e := startEmulator(t, emulator.Options{})
		p := newProvider(t, e, email.Config{})
		if res := send(p, command("not an address"), time.Second); res.Class != sinks.Permanent || res.Rule != "bad_address" || !res.RetireDevice {
			t.Fatalf("result %+v, want permanent bad_address retiring", res)
		}
		if n, _ := e.Connections(); n != 0 {
			t.Fatalf("%d connections, want none", n)
		}
	})
}

// TestEveryAttemptOfADeliveryIsTheSameMessage: two sends of one command
// (a retry after an ambiguous cut) carry the same Message-ID and Date, and
// the mailbox shows one message.
func TestEveryAttemptOfADeliveryIsTheSameMessage(t *testing.T) {
	e := startEmulator(t, emulator.Options{})
	p := newProvider(t, e, email.Config{})
	e.AddRule(emulator.Rule{Cut: true, Times: 1})
	cmd := command("ada@example.com")
	if res := send(p, cmd, 5*time.Second); res.Class != sinks.Ambiguous {
		t.Fatalf("first attempt %+v, want ambiguous", res)
	}
	if res := send(p, cmd, 5*time.Second); res.Class != sinks.Success {
		t.Fatalf("second attempt %+v, want success", res)
	}
	got := e.Received()
	if len(got) != 2 || got[0].MessageID != got[1].MessageID || got[0].Headers["Date"] != got[1].Headers["Date"] {
		t.Fatalf("received %d messages %+v, want two with one Message-ID and Date", len(got), got)
	}
	if box := e.Mailbox("ada@example.com"); len(box) != 1 {
		t.Fatalf("the mailbox shows %d messages, want 1", len(box))
	}
}

// TestConnectionsAreReusedAndBounded: 40 sends, 8 at a time, over at most
// MaxConns connections, most of them reused.
func TestConnectionsAreReusedAndBounded(t *testing.T) {
	e := startEmulator(t, emulator.Options{Latency: 5 * time.Millisecond})
	p := newProvider(t, e, email.Config{MaxConns: 2})
	var wg sync.WaitGroup
	errs := make(chan string, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := command(fmt.Sprintf("u%d@example.com", i))
			cmd.DeliveryID = identity.DeliveryID(nid, fmt.Sprint("d", i))
			if res := send(p, cmd, 30*time.Second); res.Class != sinks.Success {
				errs <- fmt.Sprintf("send %d: %s %s %v", i, res.Class, res.Rule, res.Err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	total, maxOpen := e.Connections()
	if maxOpen > 2 || total > 2 {
		t.Fatalf("%d connections, at most %d open at once; want at most 2 of each (reused, bounded)", total, maxOpen)
	}
	if e.Total() != 40 {
		t.Fatalf("the server read %d messages, want 40", e.Total())
	}
}

// TestSTARTTLSAndAUTHAreUsed: against a server that requires AUTH PLAIN
// and offers STARTTLS, the adapter verifies the certificate, upgrades,
// authenticates and sends; a wrong password is a permanent
// session_refused.
func TestSTARTTLSAndAUTHAreUsed(t *testing.T) {
	e := startEmulator(t, emulator.Options{TLS: true, Username: "herald", Password: "s3cret"})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.CertPEM())
	p := newProvider(t, e, email.Config{TLS: email.TLSStartTLS, RootCAs: pool, Username: "herald", Password: "s3cret"})
	if res := send(p, command("ada@example.com"), 5*time.Second); res.Class != sinks.Success {
		t.Fatalf("result %s %s %v, want success", res.Class, res.Rule, res.Err)
	}
	bad := newProvider(t, e, email.Config{TLS: email.TLSStartTLS, RootCAs: pool, Username: "herald", Password: "wrong"})
	if res := send(bad, command("ada@example.com"), 5*time.Second); res.Class != sinks.Permanent || res.Rule != "session_refused" || res.Status != 535 {
		t.Fatalf("result %s %s %d %v, want permanent session_refused 535", res.Class, res.Rule, res.Status, res.Err)
	}
	untrusted := newProvider(t, e, email.Config{TLS: email.TLSStartTLS, Username: "herald", Password: "s3cret"})
	if res := send(untrusted, command("ada@example.com"), 5*time.Second); res.Class == sinks.Success {
		t.Fatal("a certificate nobody trusts was accepted")
	}
}

// TestAConnectionTheServerClosedWhileIdleIsReplacedWithoutAFailure: the
// pool's connection is dropped by the server between two sends; the
// second send dials again (nothing was sent on the dead one) and
// succeeds.
func TestAConnectionTheServerClosedWhileIdleIsReplacedWithoutAFailure(t *testing.T) {
	e := startEmulator(t, emulator.Options{})
	p := newProvider(t, e, email.Config{MaxConns: 1})
	if res := send(p, command("ada@example.com"), 5*time.Second); res.Class != sinks.Success {
		t.Fatalf("first send %+v", res)
	}
	e.DropConnections()
	second := command("bob@example.com")
	second.DeliveryID = identity.DeliveryID(nid, "other")
	if res := send(p, second, 5*time.Second); res.Class != sinks.Success {
		t.Fatalf("second send %s %s %v, want success on a new connection", res.Class, res.Rule, res.Err)
	}
	if total, _ := e.Connections(); total != 2 || e.Total() != 2 {
		t.Fatalf("%d connections and %d messages, want 2 and 2", total, e.Total())
	}
}

// TestImplicitTLSIsUsed: against a server that speaks TLS from the start
// and requires AUTH PLAIN, the adapter in implicit mode verifies its
// certificate, authenticates and sends; in STARTTLS mode it cannot.
func TestImplicitTLSIsUsed(t *testing.T) {
	e := startEmulator(t, emulator.Options{ImplicitTLS: true, Username: "herald", Password: "s3cret"})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.CertPEM())
	p := newProvider(t, e, email.Config{TLS: email.TLSImplicit, RootCAs: pool, Username: "herald", Password: "s3cret"})
	if res := send(p, command("ada@example.com"), 5*time.Second); res.Class != sinks.Success {
		t.Fatalf("result %s %s %v, want success", res.Class, res.Rule, res.Err)
	}
	plain := newProvider(t, e, email.Config{TLS: email.TLSStartTLS, RootCAs: pool, Username: "herald", Password: "s3cret"})
	if res := send(plain, command("ada@example.com"), 2*time.Second); res.Class == sinks.Success {
		t.Fatal("a plain-text greeting was read from a TLS server")
	}
	if len(e.Mailbox("ada@example.com")) != 1 {
		t.Fatalf("the mailbox has %d messages, want 1", len(e.Mailbox("ada@example.com")))
	}
}

// TestConnectionReuse: with MaxPerConn 2, three sends one after another
// take two connections; with an IdleTimeout of a nanosecond, every send
// dials.
func TestConnectionReuse(t *testing.T) {
	rows := []struct {
		name  string
		cfg   email.Config
		sends int
		conns int
	}{
		{"a connection sends at most MaxPerConn messages", email.Config{MaxPerConn: 2}, 3, 2},
		{"a connection idle past its timeout is not reused", email.Config{IdleTimeout: time.Nanosecond}, 2, 2},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			e := startEmulator(t, emulator.Options{})
			p := newProvider(t, e, r.cfg)
			for i := range r.sends {
				cmd := command("ada@example.com")
				cmd.DeliveryID = identity.DeliveryID(nid, fmt.Sprint("d", i))
				if res := send(p, cmd, 5*time.Second); res.Class != sinks.Success {
					t.Fatalf("send %d: %+v", i, res)
				}
			}
			if total, _ := e.Connections(); total != r.conns {
				t.Fatalf("%d connections, want %d", total, r.conns)
			}
		})
	}
}

// TestEveryDeadIdleConnectionIsPassedOver: two idle connections, both
// closed by the server; the next send passes over both and dials.
func TestEveryDeadIdleConnectionIsPassedOver(t *testing.T) {
	e := startEmulator(t, emulator.Options{Latency: 100 * time.Millisecond})
	p := newProvider(t, e, email.Config{MaxConns: 2})
	var wg sync.WaitGroup
	for i := range 2 { // at once: two connections
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := command("ada@example.com")
			cmd.DeliveryID = identity.DeliveryID(nid, fmt.Sprint("d", i))
			if res := send(p, cmd, 5*time.Second); res.Class != sinks.Success {
				t.Errorf("send %d: %+v", i, res)
			}
		}()
	}
	wg.Wait()
	if total, _ := e.Connections(); total != 2 {
		t.Fatalf("%d connections after two sends at once, want 2", total)
	}
	e.DropConnections()
	if res := send(p, command("bob@example.com"), 5*time.Second); res.Class != sinks.Success {
		t.Fatalf("send after the drop: %s %s %v, want success", res.Class, res.Rule, res.Err)
	}
	if total, _ := e.Connections(); total != 3 {
		t.Fatalf("%d connections, want 3", total)
	}
}

// TestMailFromRepliesOnAReusedConnection: a 421 to MAIL FROM on a reused
// connection (the server is closing it) is sent again on a new one; a 550
// is the sender's refusal, permanent, and not sent again.
func TestMailFromRepliesOnAReusedConnection(t *testing.T) {
	rows := []struct {
		name  string
		rule  emulator.Rule
		class sinks.Class
		rule2 string
		conns int
	}{
		{"a 421 is sent again on a new connection", emulator.Rule{Code: 421, Enhanced: "4.4.2", Times: 1}, sinks.Success, "accepted", 2},
		{"a 550 refuses the sender", emulator.Rule{Code: 550, Enhanced: "5.7.1"}, sinks.Permanent, "sender_refused", 1},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			e := startEmulator(t, emulator.Options{})
			p := newProvider(t, e, email.Config{})
			if res := send(p, command("ada@example.com"), 5*time.Second); res.Class != sinks.Success {
				t.Fatalf("first send %+v", res)
			}
			r.rule.Address, r.rule.At = "no-reply@herald.test", emulator.AtMail
			e.AddRule(r.rule)
			second := command("bob@example.com")
			second.DeliveryID = identity.DeliveryID(nid, "other")
			res := send(p, second, 5*time.Second)
			if res.Class != r.class || res.Rule != r.rule2 {
				t.Fatalf("second send %s %s %v, want %s %s", res.Class, res.Rule, res.Err, r.class, r.rule2)
			}
			if total, _ := e.Connections(); total != r.conns {
				t.Fatalf("%d connections, want %d", total, r.conns)
			}
		})
	}
}

// TestTheAttemptNamesTheServersReply: a success carries the server's final
// reply (its queue id, in real servers) as the provider's message id; a
// failure carries none.
func TestTheAttemptNamesTheServersReply(t *testing.T) {
	e := startEmulator(t, emulator.Options{})
	p := newProvider(t, e, email.Config{})
	if res := send(p, command("ada@example.com"), 5*time.Second); res.Class != sinks.Success || !strings.Contains(res.MessageID, "queued") {
		t.Fatalf("result %+v, want success with the server's reply", res)
	}
	e.AddRule(emulator.Rule{Address: "bob@example.com", Code: 554, At: emulator.AtData})
	if res := send(p, command("bob@example.com"), 5*time.Second); res.Class != sinks.Permanent || res.MessageID != "" {
		t.Fatalf("result %+v, want permanent without a message id", res)
	}
}
