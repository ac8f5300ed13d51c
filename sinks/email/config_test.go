package email_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/email"
	"github.com/heraldhq/herald/sinks/email/emulator"
)

// TestNewRefusesEveryBadSetting: each bad setting is named; the good ones
// around them pass.
func TestNewRefusesEveryBadSetting(t *testing.T) {
	ok := func(mod func(*email.Config)) email.Config {
		c := email.Config{Host: "smtp.example.com", From: "no-reply@example.com"}
		mod(&c)
		return c
	}
	rows := []struct {
		name string
		c    email.Config
		want string // "" for no error
	}{
		{"a host and a sender are enough", ok(func(*email.Config) {}), ""},
		{"no host is refused", ok(func(c *email.Config) { c.Host = "" }), "host"},
		{"an unknown TLS mode is refused", ok(func(c *email.Config) { c.TLS = "maybe" }), "TLS"},
		{"port 1 is taken", ok(func(c *email.Config) { c.Port = 1 }), ""},
		{"port 65535 is taken", ok(func(c *email.Config) { c.Port = 65535 }), ""},
		{"port 65536 is refused", ok(func(c *email.Config) { c.Port = 65536 }), "port"},
		{"a negative port is refused", ok(func(c *email.Config) { c.Port = -1 }), "port"},
		{"a user name alone authenticates with plain", ok(func(c *email.Config) { c.Username = "u" }), ""},
		{"an unknown mechanism is refused", ok(func(c *email.Config) { c.Username, c.Auth = "u", "kerberos" }), "auth must be"},
		{"a mechanism without a user name is refused", ok(func(c *email.Config) { c.Auth = "login" }), "username"},
		{"a sender that is no address is refused", ok(func(c *email.Config) { c.From = "nobody" }), "sender"},
		{"no sender is refused", ok(func(c *email.Config) { c.From = "" }), "sender"},
		{"an unsubscribe URL that is not http(s) is refused", ok(func(c *email.Config) { c.UnsubscribeURL = "mailto:u@example.com" }), "unsubscribe"},
		{"a relative unsubscribe URL is refused", ok(func(c *email.Config) { c.UnsubscribeURL = "/prefs/{recipient}" }), "unsubscribe"},
		{"a default template that does not parse is refused", ok(func(c *email.Config) { c.Default.Text = "{{.Title" }), "template default"},
		{"a type's template that does not parse is refused", ok(func(c *email.Config) {
			c.Templates = map[string]email.Template{"x": {HTML: "{{end}}"}}
		}), "template x"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			p, err := email.New(r.c)
			if r.want == "" {
				if err != nil {
					t.Fatalf("New: %v, want none", err)
				}
				p.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), r.want) {
				t.Fatalf("New: %v, want an error naming %q", err, r.want)
			}
		})
	}
}

func TestCheckAddressTakesOneBareAddressOfAtMost254Bytes(t *testing.T) {
	long := strings.Repeat("a", 64) + "@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	rows := []struct {
		addr string
		ok   bool
	}{
		{"ada@example.com", true},
		{long, true},        // 254 bytes
		{long + "d", false}, // 255
		{"Ada <ada@example.com>", false},
		{"<ada@example.com>", false},
		{"ada", false},
		{"", false},
		{"ada@example.com, bob@example.com", false},
	}
	if len(long) != 254 {
		t.Fatalf("the long address has %d bytes, want 254", len(long))
	}
	for _, r := range rows {
		if err := email.CheckAddress(r.addr); (err == nil) != r.ok {
			t.Errorf("CheckAddress(%q) = %v, want ok %v", r.addr, err, r.ok)
		}
	}
}

func TestDataOfTakesTheURLOnlyWhenItIsAnHTTPURLWithAHost(t *testing.T) {
	rows := []struct{ payload, url string }{
		{`{"url":"https://example.com/i/1"}`, "https://example.com/i/1"},
		{`{"url":"http://example.com/i/1"}`, "http://example.com/i/1"},
		{`{"url":"javascript:alert(1)"}`, ""},
		{`{"url":"https:///no-host"}`, ""},
		{`{"url":"https://exa mple.com/%zz"}`, ""},
		{`{"url":7}`, ""},
		{`["https://example.com"]`, ""},
		{``, ""},
	}
	for _, r := range rows {
		d := email.DataOf(&schemas.DeliveryCommand{Payload: json.RawMessage(r.payload)}, "")
		if d.URL != r.url {
			t.Errorf("payload %s: URL %q, want %q", r.payload, d.URL, r.url)
		}
	}
	d := email.DataOf(&schemas.DeliveryCommand{Payload: json.RawMessage(`{"amount":12.50,"n":9007199254740993}`)}, "")
	if d.Payload["amount"].(json.Number) != "12.50" || d.Payload["n"].(json.Number) != "9007199254740993" {
		t.Errorf("payload numbers %v, want their text", d.Payload)
	}
}

func TestReadTemplatesChecksEveryTemplate(t *testing.T) {
	rows := []struct {
		name, file, want string
	}{
		{"a default and a type's template are read", `{"default":{"subject":"[acme] {{.Title}}"},"types":{"x":{"html":"<b>{{.Body}}</b>"}}}`, ""},
		{"an unknown member is refused", `{"default":{"subjet":"x"}}`, "subjet"},
		{"a default that does not parse is refused", `{"default":{"text":"{{.Title"}}`, "template default"},
		{"a type's template that does not parse is refused", `{"types":{"x":{"subject":"{{if}}"}}}`, "template x"},
		{"no JSON is refused", `subject: x`, "templates"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			f, err := email.ReadTemplates([]byte(r.file))
			if r.want == "" {
				if err != nil || f.Default.Subject != "[acme] {{.Title}}" || f.Types["x"].HTML != "<b>{{.Body}}</b>" {
					t.Fatalf("ReadTemplates = %+v, %v", f, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), r.want) {
				t.Fatalf("ReadTemplates: %v, want an error naming %q", err, r.want)
			}
		})
	}
}

// TestATypesTemplateTakesTheConfiguredDefaultForItsEmptyFields: a type
// that sets only its HTML gets the configured default's subject and text,
// not the built-in ones.
func TestATypesTemplateTakesTheConfiguredDefaultForItsEmptyFields(t *testing.T) {
	e := startEmulator(t, emulator.Options{})
	p := newProvider(t, e, email.Config{
		Default:   email.Template{Subject: "[acme] {{.Title}}", Text: "acme: {{.Body}}"},
		Templates: map[string]email.Template{"invoice.paid": {HTML: "<p>{{.Title}}</p>"}},
	})
	if res := send(p, command("ada@example.com"), 5*time.Second); res.Class != sinks.Success {
		t.Fatalf("result %+v", res)
	}
	m := e.Mailbox("ada@example.com")[0]
	if m.Subject != "[acme] Invoice paid" || strings.TrimSpace(m.Text) != "acme: Thanks!" || strings.TrimSpace(m.HTML) != "<p>Invoice paid</p>" {
		t.Fatalf("subject %q, text %q, html %q; want the default's subject and text and the type's HTML", m.Subject, m.Text, m.HTML)
	}
}

// TestTheDateIsTheCommandsCreation: every attempt carries the Date of the
// command's creation; a command without one takes the clock's.
func TestTheDateIsTheCommandsCreation(t *testing.T) {
	e := startEmulator(t, emulator.Options{})
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := newProvider(t, e, email.Config{Now: func() time.Time { return clock }})
	created := command("ada@example.com")
	created.CreatedAt = time.Date(2026, 2, 1, 9, 30, 0, 0, time.UTC).UnixMilli()
	none := command("bob@example.com")
	none.CreatedAt = 0
	for _, c := range []*schemas.DeliveryCommand{created, none} {
		if res := send(p, c, 5*time.Second); res.Class != sinks.Success {
			t.Fatalf("result %+v", res)
		}
	}
	for addr, want := range map[string]time.Time{"ada@example.com": time.UnixMilli(created.CreatedAt), "bob@example.com": clock} {
		got, err := time.Parse(time.RFC1123Z, e.Mailbox(addr)[0].Headers["Date"])
		if err != nil || !got.Equal(want) {
			t.Errorf("%s: Date %v (%v), want %v", addr, got, err, want)
		}
	}
}
