package email

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"net/url"
	"strings"
	texttemplate "text/template"
	"time"

	mail "github.com/wneessen/go-mail"

	"github.com/heraldhq/herald/schemas"
)

// Template is one notification type's email: a subject and a plain-text
// part (text/template) and an HTML part (html/template, so everything it
// prints is escaped for its context). Each field left empty takes the
// default's.
type Template struct {
	Subject string `json:"subject,omitempty"`
	Text    string `json:"text,omitempty"`
	HTML    string `json:"html,omitempty"`
}

// Data is what a template renders: the notification's title, body and
// payload (its JSON object, numbers kept as their text), and where the
// recipient unsubscribes.
type Data struct {
	NotificationID, Type, Tenant, Recipient string
	Title, Body, Locale                     string
	// Payload is the producer's payload when it is a JSON object (nil
	// otherwise); URL its "url" member when that is an http(s) URL.
	Payload map[string]any
	URL     string
	// UnsubscribeURL is the preferences page of the recipient (empty when
	// none is configured).
	UnsubscribeURL string
}

// DefaultTemplate is the email of a type without one of its own.
var DefaultTemplate = Template{
	Subject: `{{.Title}}`,
	Text: `{{.Title}}

{{.Body}}
{{- with .URL}}

{{.}}{{end}}
{{- with .UnsubscribeURL}}

--
Unsubscribe or change your notification preferences: {{.}}{{end}}
`,
	HTML: `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title></head>
<body>
<h1>{{.Title}}</h1>
<p>{{.Body}}</p>
{{- with .URL}}
<p><a href="{{.}}">Open</a></p>{{end}}
{{- with .UnsubscribeURL}}
<p style="font-size:small"><a href="{{.}}">Unsubscribe or change your notification preferences</a></p>{{end}}
</body></html>
`,
}

// templates are the parsed templates of one type.
type templates struct {
	subject, text *texttemplate.Template
	html          *htmltemplate.Template
}

// parse parses t, each empty field taken from DefaultTemplate; name names
// it in errors.
func parse(name string, t Template) (templates, error) {
	if t.Subject == "" {
		t.Subject = DefaultTemplate.Subject
	}
	if t.Text == "" {
		t.Text = DefaultTemplate.Text
	}
	if t.HTML == "" {
		t.HTML = DefaultTemplate.HTML
	}
	var out templates
	var errs []error
	var err error
	if out.subject, err = texttemplate.New(name + ".subject").Option("missingkey=zero").Parse(t.Subject); err != nil {
		errs = append(errs, fmt.Errorf("subject: %w", err))
	}
	if out.text, err = texttemplate.New(name + ".text").Option("missingkey=zero").Parse(t.Text); err != nil {
		errs = append(errs, fmt.Errorf("text: %w", err))
	}
	if out.html, err = htmltemplate.New(name + ".html").Option("missingkey=zero").Parse(t.HTML); err != nil {
		errs = append(errs, fmt.Errorf("html: %w", err))
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("email: template %s: %w", name, errors.Join(errs...))
	}
	return out, nil
}

// Rendered is one delivery's email content.
type Rendered struct {
	Subject, Text, HTML string
}

func (t templates) render(d Data) (Rendered, error) {
	var r Rendered
	var b bytes.Buffer
	if err := t.subject.Execute(&b, d); err != nil {
		return r, fmt.Errorf("subject: %w", err)
	}
	// A subject is one header line: no line breaks from a title.
	r.Subject = strings.Join(strings.Fields(b.String()), " ")
	b.Reset()
	if err := t.text.Execute(&b, d); err != nil {
		return r, fmt.Errorf("text: %w", err)
	}
	r.Text = b.String()
	b.Reset()
	if err := t.html.Execute(&b, d); err != nil {
		return r, fmt.Errorf("html: %w", err)
	}
	r.HTML = b.String()
	return r, nil
}

// DataOf is what a delivery's templates render; unsubscribe is the
// recipient's preferences URL ("" for none).
func DataOf(cmd *schemas.DeliveryCommand, unsubscribe string) Data {
	d := Data{NotificationID: cmd.NotificationID, Type: cmd.Type, Tenant: cmd.Tenant, Recipient: cmd.Recipient,
		Title: cmd.Title, Body: cmd.Body, Locale: cmd.Locale, UnsubscribeURL: unsubscribe}
	dec := json.NewDecoder(bytes.NewReader(cmd.Payload))
	dec.UseNumber() // numbers keep their text
	var m map[string]any
	if dec.Decode(&m) == nil { // not for an empty payload, or one that is no object
		d.Payload = m
	}
	if s, ok := d.Payload["url"].(string); ok {
		if u, err := url.Parse(s); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
			d.URL = s
		}
	}
	return d
}

// unsubscribeURL fills in the configured preferences URL pattern:
// {tenant}, {recipient}, {type}, {notification} and {delivery} become the
// command's values, query-escaped.
func unsubscribeURL(pattern string, cmd *schemas.DeliveryCommand) string {
	if pattern == "" {
		return ""
	}
	return strings.NewReplacer(
		"{tenant}", url.QueryEscape(cmd.Tenant),
		"{recipient}", url.QueryEscape(cmd.Recipient),
		"{type}", url.QueryEscape(cmd.Type),
		"{notification}", url.QueryEscape(cmd.NotificationID),
		"{delivery}", url.QueryEscape(cmd.DeliveryID),
	).Replace(pattern)
}

// CheckUnsubscribeURL checks a preferences URL pattern: an absolute http
// or https URL once its placeholders are filled in.
func CheckUnsubscribeURL(pattern string) error {
	if pattern == "" {
		return nil
	}
	u, err := url.Parse(unsubscribeURL(pattern, &schemas.DeliveryCommand{Tenant: "t", Recipient: "r", Type: "x", NotificationID: "n", DeliveryID: "d"}))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return errors.New("email: the unsubscribe URL must be an absolute http or https URL")
	}
	return nil
}

// Header names herald sets besides the standard ones.
const (
	// HeaderNotificationID carries the notification id, for the
	// recipient's own filters and for support.
	HeaderNotificationID = "X-Herald-Notification-Id"
	// HeaderType carries the notification type.
	HeaderType = "X-Herald-Type"
)

// MessageID is the Message-ID (without angle brackets) of every attempt of
// a delivery: the delivery id at the domain.
func MessageID(deliveryID, domain string) string { return deliveryID + "@" + domain }

// message builds the email of one delivery to address to.
func (p *Provider) message(cmd *schemas.DeliveryCommand, to string, r Rendered, unsubscribe string) (*mail.Msg, error) {
	m := mail.NewMsg(mail.WithNoDefaultUserAgent())
	m.FromMailAddress(p.from)
	if err := m.To(to); err != nil {
		return nil, err
	}
	m.Subject(r.Subject)
	m.SetMessageIDWithValue(MessageID(cmd.DeliveryID, p.domain))
	created := p.c.Now()
	if cmd.CreatedAt > 0 {
		created = time.UnixMilli(cmd.CreatedAt)
	}
	m.SetDateWithValue(created) // the same on every attempt, like the Message-ID
	m.SetGenHeader(HeaderNotificationID, cmd.NotificationID)
	m.SetGenHeader(HeaderType, cmd.Type)
	m.SetGenHeader(mail.Header("Auto-Submitted"), "auto-generated")
	if unsubscribe != "" {
		m.SetGenHeaderPreformatted(mail.HeaderListUnsubscribe, "<"+unsubscribe+">")
		if strings.HasPrefix(unsubscribe, "https://") { // RFC 8058 §3.1: one-click needs an HTTPS URI
			m.SetGenHeader(mail.HeaderListUnsubscribePost, "List-Unsubscribe=One-Click")
		}
	}
	m.SetBodyString(mail.TypeTextPlain, r.Text)
	m.AddAlternativeString(mail.TypeTextHTML, r.HTML)
	return m, nil
}

// TemplateFile is the templates file (JSON) the email sink reads: a
// default for every type, and a template per type.
//
//	{"default": {"subject": "…", "text": "…", "html": "…"},
//	 "types": {"invoice.paid": {"subject": "Invoice {{.Payload.invoice}} paid"}}}
type TemplateFile struct {
	Default Template            `json:"default"`
	Types   map[string]Template `json:"types"`
}

// ReadTemplates reads and checks a templates file: every template parses.
func ReadTemplates(b []byte) (TemplateFile, error) {
	var f TemplateFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("email: templates: %w", err)
	}
	if _, err := parse("default", f.Default); err != nil {
		return f, err
	}
	for typ, t := range f.Types {
		if _, err := parse(typ, t); err != nil {
			return f, err
		}
	}
	return f, nil
}
