// Package email owns herald's email adapter on the sink runtime (package
// sinks): one SMTP submission per attempt, with
// github.com/wneessen/go-mail (STARTTLS or implicit TLS, SMTP AUTH), over
// at most MaxConns connections kept open and reused, classified.
// Retries, intents, the sent-set and the audit are the runtime's; go-mail
// makes one transaction per call and never retries.
//
// An address is registered as a device of platform "email" whose token is
// the address (PUT /v1/users/{id}/devices/{dev} with {"email": …}); the
// route stage sends it the notifications that ask for the email channel,
// not deferred by quiet hours (unless the type is in the route stage's
// --quiet-email-types).
//
// # Identity
//
// Every attempt of one delivery carries the same Message-ID,
// <deliveryId@domain> (MessageID), and the same Date (the command's
// creation). A retry after an ambiguous attempt (the connection cut after
// the end of data, a timeout before the final reply) is then the same
// message: a mailbox that collapses copies by Message-ID (Gmail does,
// and mail clients thread them) shows one. The notification id is in the
// X-Herald-Notification-Id header, for the recipient's own filters.
//
// # Content
//
// A plain-text part and an HTML part, rendered from the title, the body
// and the payload (Data) with the type's Template (text/template for the
// subject and the text, html/template, which escapes, for the HTML), and
// List-Unsubscribe with the recipient's preferences URL (Config.
// UnsubscribeURL), plus List-Unsubscribe-Post: List-Unsubscribe=One-Click
// (RFC 8058) when that URL is HTTPS.
//
// # Classification (RFC 5321 reply codes, RFC 3463 enhanced codes)
//
//	phase              reply                           class       rule
//	-                  250 after the end of data       success     accepted
//	any before the end no reply (refused, reset,       retryable   not_sent
//	of data            timeout)
//	writing the body   any failure (the end-of-data    retryable   not_sent
//	                   mark was never written: the
//	                   server keeps nothing)
//	after the end of   no reply (cut, reset, timeout)  ambiguous   no_final_reply
//	data
//	session (greeting, 4xx                             retryable   session_deferred
//	EHLO, STARTTLS,    5xx (535 auth failed, 554)      permanent   session_refused (configuration)
//	AUTH)
//	MAIL, RCPT, DATA,  4xx (greylisting, mailbox busy) retryable   deferred
//	final reply
//	MAIL               5xx                             permanent   sender_refused
//	RCPT               550, 551, 553 with no enhanced  permanent   mailbox_unavailable (retires the address)
//	                   code, a 5.1.x one, or 5.2.1
//	RCPT               other 5xx (5.7.1 policy, 552)   permanent   recipient_refused (keeps the address)
//	DATA, final reply  5xx (spam, size)                permanent   message_refused
//	-                  address not an address          permanent   bad_address (retires the address)
//	-                  a template fails                permanent   unrenderable
//	-                  no connection free in time      retryable   not_sent
//
// A reused connection the server closed while it was idle fails at MAIL
// FROM with no reply or with 421: nothing was sent, so the call passes
// over it to the next idle connection, or a new one.
package email

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
)

// Channel is the email channel's name, and Platform the device platform
// of a registered address.
const (
	Channel  = "email"
	Platform = "email"
)

// TLS modes.
const (
	// TLSStartTLS upgrades with STARTTLS and refuses a server without it
	// (submission, port 587).
	TLSStartTLS = "starttls"
	// TLSOpportunistic upgrades when the server offers STARTTLS.
	TLSOpportunistic = "opportunistic"
	// TLSImplicit speaks TLS from the start (submissions, port 465).
	TLSImplicit = "implicit"
	// TLSNone never encrypts (a local relay or emulator only).
	TLSNone = "none"
)

// Auth mechanisms.
var authTypes = map[string]gomail.SMTPAuthType{
	"plain": gomail.SMTPAuthPlain, "login": gomail.SMTPAuthLogin, "cram-md5": gomail.SMTPAuthCramMD5,
	"scram-sha-1": gomail.SMTPAuthSCRAMSHA1, "scram-sha-256": gomail.SMTPAuthSCRAMSHA256, "xoauth2": gomail.SMTPAuthXOAUTH2,
}

// AuthMechanisms are the Auth values New takes.
var AuthMechanisms = []string{"plain", "login", "cram-md5", "scram-sha-1", "scram-sha-256", "xoauth2"}

// Config configures the email adapter.
type Config struct {
	// Host and Port of the submission server (Port 587 by default, 465
	// with TLSImplicit).
	Host string
	Port int
	// TLS is starttls (default), opportunistic, implicit or none.
	TLS string
	// RootCAs verify the server (the system's when nil); ServerName is
	// the name its certificate must carry (Host by default).
	RootCAs    *x509.CertPool
	ServerName string
	// Username and Password authenticate with Auth (plain by default when
	// a username is set; no AUTH without one). The password is never
	// logged.
	Username, Password, Auth string
	// HELO is the name the client greets with (the host's name by
	// default).
	HELO string
	// From is the sender, an RFC 5322 address ("Herald <no-reply@example.com>").
	From string
	// MessageIDDomain is the right-hand side of every Message-ID (From's
	// domain by default).
	MessageIDDomain string
	// UnsubscribeURL is the recipient's preferences page, with
	// placeholders {tenant}, {recipient}, {type}, {notification} and
	// {delivery} (query-escaped): List-Unsubscribe, and the templates'
	// .UnsubscribeURL. Empty: no List-Unsubscribe header.
	UnsubscribeURL string
	// Templates by notification type; Default for the others (each empty
	// field takes DefaultTemplate's).
	Templates map[string]Template
	Default   Template
	// MaxConns bounds the open connections (4 by default); a call waits
	// for a free one until its deadline.
	MaxConns int
	// MaxPerConn is how many messages one connection sends before it is
	// closed (100 by default); IdleTimeout how long an unused one is kept
	// (30 s by default).
	MaxPerConn  int
	IdleTimeout time.Duration
	// Timeout bounds connecting and each command (30 s by default); the
	// call's deadline bounds them too.
	Timeout time.Duration
	// Now is the clock (time.Now by default).
	Now func() time.Time
}

// Provider sends email.
type Provider struct {
	c      Config
	from   *mail.Address
	domain string
	tmpl   map[string]templates
	def    templates
	pool   *pool
}

// New builds the adapter; it connects on the first send.
func New(c Config) (*Provider, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	p := &Provider{c: c, tmpl: map[string]templates{}}
	p.from, _ = mail.ParseAddress(c.From) // checked
	p.domain = c.MessageIDDomain
	if p.domain == "" {
		p.domain = p.from.Address[strings.LastIndexByte(p.from.Address, '@')+1:]
	}
	var err error
	if p.def, err = parse("default", c.Default); err != nil {
		return nil, err
	}
	for typ, t := range c.Templates {
		if t.Subject == "" {
			t.Subject = c.Default.Subject
		}
		if t.Text == "" {
			t.Text = c.Default.Text
		}
		if t.HTML == "" {
			t.HTML = c.Default.HTML
		}
		if p.tmpl[typ], err = parse(typ, t); err != nil {
			return nil, err
		}
	}
	if p.c.Now == nil {
		p.c.Now = time.Now
	}
	client, err := p.client()
	if err != nil {
		return nil, err
	}
	p.pool = &pool{client: client, slots: make(chan struct{}, c.MaxConns), idleTO: c.IdleTimeout, perCon: c.MaxPerConn}
	return p, nil
}

// check fills in defaults and reports every bad setting.
func (c *Config) check() error {
	var errs []error
	if c.Host == "" {
		errs = append(errs, errors.New("email: the SMTP host is required"))
	}
	if c.TLS == "" {
		c.TLS = TLSStartTLS
	}
	switch c.TLS {
	case TLSStartTLS, TLSOpportunistic, TLSNone:
		if c.Port == 0 {
			c.Port = 587
		}
	case TLSImplicit:
		if c.Port == 0 {
			c.Port = 465
		}
	default:
		errs = append(errs, fmt.Errorf("email: TLS must be starttls, opportunistic, implicit or none, got %q", c.TLS))
	}
	if c.Port < 1 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("email: the SMTP port must be in [1, 65535], got %d", c.Port))
	}
	if c.Auth == "" && c.Username != "" {
		c.Auth = "plain"
	}
	if _, ok := authTypes[c.Auth]; c.Auth != "" && !ok {
		errs = append(errs, fmt.Errorf("email: auth must be one of %s, got %q", strings.Join(AuthMechanisms, ", "), c.Auth))
	}
	if c.Auth != "" && c.Username == "" {
		errs = append(errs, errors.New("email: auth needs a username"))
	}
	if err := CheckFrom(c.From); err != nil {
		errs = append(errs, err)
	}
	if err := CheckUnsubscribeURL(c.UnsubscribeURL); err != nil {
		errs = append(errs, err)
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 4
	}
	if c.MaxPerConn <= 0 {
		c.MaxPerConn = 100
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	return errors.Join(errs...)
}

// CheckFrom checks a sender: one RFC 5322 address.
func CheckFrom(from string) error {
	if from == "" {
		return errors.New("email: the sender (from) is required")
	}
	if _, err := mail.ParseAddress(from); err != nil {
		return fmt.Errorf("email: the sender %q is not an address: %v", from, err)
	}
	return nil
}

// CheckAddress checks a recipient address as the API registers it: one
// bare address (local@domain, no display name), at most 254 bytes.
func CheckAddress(addr string) error {
	if len(addr) > 254 {
		return errors.New("must be at most 254 bytes")
	}
	a, err := mail.ParseAddress(addr)
	if err != nil {
		return errors.New("is not an email address")
	}
	if a.Name != "" || a.Address != addr {
		return errors.New("must be a bare address (local@domain), without a name or angle brackets")
	}
	return nil
}

// client is go-mail's client with the configured TLS and AUTH; it dials
// through dialer, so the call's deadline bounds every read and write.
func (p *Provider) client() (*gomail.Client, error) {
	c := p.c
	tc := &tls.Config{ServerName: c.ServerName, RootCAs: c.RootCAs, MinVersion: tls.VersionTLS12}
	if tc.ServerName == "" {
		tc.ServerName = c.Host
	}
	var implicit *tls.Config
	opts := []gomail.Option{gomail.WithPort(c.Port), gomail.WithTimeout(c.Timeout), gomail.WithTLSConfig(tc),
		gomail.WithoutNoop(), gomail.WithoutRset()}
	switch c.TLS {
	case TLSImplicit:
		implicit = tc
		opts = append(opts, gomail.WithSSL())
	case TLSOpportunistic:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSOpportunistic))
	case TLSNone:
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	default:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	}
	opts = append(opts, gomail.WithDialContextFunc(dialer(implicit)))
	if c.HELO != "" {
		opts = append(opts, gomail.WithHELO(c.HELO))
	}
	if c.Auth != "" {
		opts = append(opts, gomail.WithSMTPAuth(authTypes[c.Auth]), gomail.WithUsername(c.Username), gomail.WithPassword(c.Password))
	}
	cl, err := gomail.NewClient(c.Host, opts...)
	if err != nil {
		return nil, fmt.Errorf("email: client: %w", err)
	}
	return cl, nil
}

// Send implements sinks.Provider.
func (p *Provider) Send(ctx context.Context, cmd *schemas.DeliveryCommand) sinks.Result {
	to := cmd.Token
	if err := CheckAddress(to); err != nil {
		return sinks.Result{Class: sinks.Permanent, Rule: "bad_address", Reason: "the address " + err.Error(), RetireDevice: true}
	}
	unsubscribe := unsubscribeURL(p.c.UnsubscribeURL, cmd)
	t, ok := p.tmpl[cmd.Type]
	if !ok {
		t = p.def
	}
	r, err := t.render(DataOf(cmd, unsubscribe))
	if err != nil {
		return sinks.Result{Class: sinks.Permanent, Rule: "unrenderable", Reason: err.Error(), Err: err}
	}
	m, err := p.message(cmd, to, r, unsubscribe)
	if err != nil {
		return sinks.Result{Class: sinks.Permanent, Rule: "bad_address", Reason: err.Error(), RetireDevice: true, Err: err}
	}
	for {
		s, reused, err := p.pool.get(ctx)
		if err != nil {
			return classifySession(err)
		}
		err = p.pool.client.SendWithSMTPClient(s.c, m)
		res := classifySend(err)
		s.sent++
		p.pool.put(s, res.Class == sinks.Success)
		if reused && stale(err) {
			// The server closed the idle connection: nothing was sent.
			// The next is another idle one, or a new one.
			continue
		}
		if res.Class == sinks.Success {
			// The server's reply ("2.0.0 Ok: queued as 4Zx…"), which
			// names the message in its logs; our Message-ID otherwise.
			res.MessageID = "<" + MessageID(cmd.DeliveryID, p.domain) + ">"
			if reply := m.ServerResponse(); reply != "" {
				res.MessageID = reply[:min(len(reply), 200)]
			}
		}
		return res
	}
}

// stale reports whether a send on a reused connection failed because the
// server had closed it: no reply, or 421, to the first command (MAIL FROM).
func stale(err error) bool {
	var se *gomail.SendError
	if !errors.As(err, &se) || se.Reason != gomail.ErrSMTPMailFrom {
		return false
	}
	return se.ErrorCode() == 0 || se.ErrorCode() == 421
}

// Close closes the idle connections.
func (p *Provider) Close() { p.pool.close() }
