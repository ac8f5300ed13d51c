// Package emulator owns herald's local SMTP server with faults, built on
// github.com/emersion/go-smtp: it takes submissions as a mail server
// does, keeps every message it read for inspection (GET
// /emulator/messages on its HTTP address, like the other emulators), and
// answers scripted per recipient address, with injected faults: a 4xx or
// 5xx reply at RCPT TO or after the end of data, the connection cut after
// the end of data (the message kept, as a server that queued it and lost
// the connection before its reply), a reply slower than the client's
// deadline. `herald emulate smtp` runs it; `herald dev` sends to it.
//
// It offers STARTTLS with a self-signed certificate when Options.TLS is
// set (CertPEM for the client's trust) and takes any AUTH PLAIN
// credentials when Options.Username is set (and then requires them).
//
// Mailbox shows what a recipient sees: the messages kept for an address,
// one per Message-ID (a mailbox that collapses copies by Message-ID, as
// Gmail does); Received shows every transaction.
package emulator

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	netmail "net/mail"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/heraldhq/herald/sinks/emulate"
)

// Options configure an emulator.
type Options struct {
	// Addr is the SMTP address, HTTPAddr the inspection API's
	// ("127.0.0.1:0" each by default).
	Addr, HTTPAddr string
	// TLS offers STARTTLS with a self-signed certificate for 127.0.0.1,
	// localhost and CertHosts; ImplicitTLS speaks TLS from the start
	// instead (port 465 style), with the same certificate.
	TLS, ImplicitTLS bool
	CertHosts        []string
	// Username and Password, when Username is set, are required with
	// AUTH PLAIN before MAIL FROM.
	Username, Password string
	// Latency delays every final reply.
	Latency time.Duration
	// MaxRecords keeps only the last MaxRecords messages (0: all).
	MaxRecords int
	Logger     *slog.Logger
}

// Phase is where a rule's reply is given.
type Phase string

// Phases a rule answers at.
const (
	AtMail Phase = "mail" // MAIL FROM; the rule's Address is the sender's
	AtRcpt Phase = "rcpt"
	AtData Phase = "data" // the final reply, after the end of data
)

// Rule scripts the answer to transactions for one recipient address ("" for
// every address).
type Rule struct {
	Address string
	// Code and Enhanced ("5.1.1") are the reply, at At (AtRcpt by
	// default); Message its text.
	Code     int
	Enhanced string
	Message  string
	At       Phase
	// Cut closes the connection after the end of data, before any reply;
	// the message is kept (the server has it).
	Cut bool
	// Delay holds the final reply this long.
	Delay time.Duration
	// Times the rule applies, then it is dropped (0: forever).
	Times int
}

// Faults are injected at random into transactions no rule scripts:
// ResetRate is the share cut after the end of data, SlowRate the share
// answered after SlowDelay.
type Faults = emulate.Faults

// Message is one transaction the emulator read to its end of data.
type Message struct {
	At        time.Time `json:"at"`
	From      string    `json:"from"`
	To        []string  `json:"to"`
	MessageID string    `json:"messageId"`
	Subject   string    `json:"subject"`
	// Headers are the message's header fields (their first values).
	Headers map[string]string `json:"headers"`
	Text    string            `json:"text"`
	HTML    string            `json:"html"`
	Bytes   int               `json:"bytes"`
	// Answer is the final reply ("250", "451 4.7.1"), "cut" or "slow".
	Answer string `json:"answer"`
	// Kept is whether the server has the message (250, cut, slow).
	Kept bool `json:"kept"`
}

// Emulator is a running SMTP server.
type Emulator struct {
	o       Options
	srv     *smtp.Server
	ln      net.Listener
	httpLn  net.Listener
	httpSrv *http.Server
	certPEM []byte
	log     *emulate.Log[Message]

	mu                 sync.Mutex
	rules              []*Rule
	faults             Faults
	tempRate, permRate float64
	// sessions counts connections since Start; open and maxOpen the
	// connections open now and at most.
	sessions, open, maxOpen int
	conns                   map[*smtp.Conn]bool
}

// Start listens and serves until Close.
func Start(o Options) (*Emulator, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	e := &Emulator{o: o, log: emulate.NewLog[Message](o.MaxRecords), conns: map[*smtp.Conn]bool{}}
	s := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		e.mu.Lock()
		e.sessions++
		e.open++
		e.maxOpen = max(e.maxOpen, e.open)
		e.conns[c] = true
		e.mu.Unlock()
		return &session{e: e, conn: c}, nil
	}))
	s.Domain = "localhost"
	s.ReadTimeout, s.WriteTimeout = time.Minute, time.Minute
	s.MaxMessageBytes = 10 << 20
	s.MaxRecipients = 100
	s.AllowInsecureAuth = true
	s.ErrorLog = slogLogger{o.Logger}
	if o.TLS || o.ImplicitTLS {
		cert, pemBytes, err := emulate.SelfSigned("herald smtp emulator", o.CertHosts)
		if err != nil {
			return nil, fmt.Errorf("smtp emulator: certificate: %w", err)
		}
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
		e.certPEM = pemBytes
	}
	e.srv = s
	var err error
	if e.ln, err = emulate.Listen("smtp emulator", o.Addr); err != nil {
		return nil, err
	}
	if o.ImplicitTLS {
		e.ln = tls.NewListener(e.ln, s.TLSConfig)
		s.TLSConfig = nil // no STARTTLS inside TLS
	}
	if e.httpLn, err = emulate.Listen("smtp emulator (http)", o.HTTPAddr); err != nil {
		e.ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /emulator/messages", e.log.Handler("messages"))
	e.httpSrv = emulate.NewServer(mux, o.Logger)
	go s.Serve(e.ln)
	go e.httpSrv.Serve(e.httpLn)
	return e, nil
}

// Addr is the SMTP address (host:port); URL the inspection API's base URL.
func (e *Emulator) Addr() string { return e.ln.Addr().String() }

// URL is the base URL of the inspection API.
func (e *Emulator) URL() string { return "http://" + e.httpLn.Addr().String() }

// CertPEM is the STARTTLS certificate (nil without Options.TLS).
func (e *Emulator) CertPEM() []byte { return e.certPEM }

// AddRule scripts answers; rules are matched in the order added.
func (e *Emulator) AddRule(r Rule) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rules = append(e.rules, &r)
}

// SetFaults sets the random faults.
func (e *Emulator) SetFaults(f Faults) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = f
}

// Received returns every message read so far, oldest first.
func (e *Emulator) Received() []Message { return e.log.Items() }

// Total is the number of messages read since Start.
func (e *Emulator) Total() int { return e.log.Total() }

// Mailbox returns the messages the server kept for address, one per
// Message-ID (the first copy), oldest first.
func (e *Emulator) Mailbox(address string) []Message {
	var out []Message
	seen := map[string]bool{}
	for _, m := range e.log.Items() {
		if !m.Kept || !contains(m.To, address) || (m.MessageID != "" && seen[m.MessageID]) {
			continue
		}
		seen[m.MessageID] = true
		out = append(out, m)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// Close stops both servers and drops their connections.
func (e *Emulator) Close() error {
	return errors.Join(e.srv.Close(), e.httpSrv.Close())
}

// answer returns the rule for a transaction to address: the first
// matching rule (used up after Times), or a random fault, or none. With
// mail set it is the sender's MAIL FROM, which only AtMail rules answer.
func (e *Emulator) answer(address string, mail bool) Rule {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, rule := range e.rules {
		if (rule.Address != "" && !strings.EqualFold(rule.Address, address)) || (rule.At == AtMail) != mail {
			continue
		}
		if rule.Times > 0 {
			if rule.Times--; rule.Times == 0 {
				e.rules = append(e.rules[:i:i], e.rules[i+1:]...)
			}
		}
		return *rule
	}
	if mail {
		return Rule{}
	}
	x := mrand.Float64()
	f := e.faults
	if x < f.ResetRate {
		return Rule{Cut: true}
	} else if x < f.ResetRate+f.SlowRate {
		return Rule{Delay: f.SlowDelay}
	} else if x < f.ResetRate+f.SlowRate+e.tempRate {
		return Rule{Code: 451, Enhanced: "4.3.0", Message: "injected temporary failure", At: AtData}
	} else if x < f.ResetRate+f.SlowRate+e.tempRate+e.permRate {
		return Rule{Code: 550, Enhanced: "5.1.1", Message: "injected: no such mailbox"}
	}
	return Rule{}
}

// SetFailureRates sets the share of transactions answered 451 4.3.0 after
// the end of data (temp, the message not kept) and of recipients answered
// 550 5.1.1 at RCPT TO (perm), drawn with the faults.
func (e *Emulator) SetFailureRates(temp, perm float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tempRate, e.permRate = temp, perm
}

// session is one SMTP connection's state.
type session struct {
	e      *Emulator
	conn   *smtp.Conn
	authed bool
	from   string
	to     []string
	rule   Rule
}

func (s *session) AuthMechanisms() []string {
	if s.e.o.Username == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (s *session) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != s.e.o.Username || pass != s.e.o.Password {
			return smtp.ErrAuthFailed
		}
		s.authed = true
		return nil
	}), nil
}

func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	if s.e.o.Username != "" && !s.authed {
		return smtp.ErrAuthRequired
	}
	if r := s.e.answer(from, true); r.Code != 0 {
		return replyError(r)
	}
	s.from = from
	return nil
}

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	r := s.e.answer(to, false)
	if r.Code != 0 && r.At != AtData {
		return replyError(r)
	}
	if len(s.to) == 0 {
		s.rule = r // the first recipient's rule answers the data
	}
	s.to = append(s.to, to)
	return nil
}

func replyError(r Rule) error {
	ec := smtp.EnhancedCodeNotSet
	if r.Enhanced != "" {
		var a, b, c int
		if _, err := fmt.Sscanf(r.Enhanced, "%d.%d.%d", &a, &b, &c); err == nil {
			ec = smtp.EnhancedCode{a, b, c}
		}
	}
	msg := r.Message
	if msg == "" {
		msg = "scripted reply"
	}
	return &smtp.SMTPError{Code: r.Code, EnhancedCode: ec, Message: msg}
}

func (s *session) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m := parse(raw)
	m.At, m.From, m.To, m.Bytes = time.Now(), s.from, append([]string(nil), s.to...), len(raw)
	rule := s.rule
	switch {
	case rule.Cut:
		m.Answer, m.Kept = "cut", true
	case rule.Code != 0:
		m.Answer = fmt.Sprintf("%d %s", rule.Code, rule.Enhanced)
	case rule.Delay > 0:
		m.Answer, m.Kept = "slow", true
	default:
		m.Answer, m.Kept = "250", true
	}
	m.Answer = strings.TrimSpace(m.Answer)
	s.e.o.Logger.Debug("smtp emulator read a message", "to", m.To, "message_id", m.MessageID, "answer", m.Answer)
	s.e.log.Add(m)
	if rule.Cut {
		s.conn.Conn().Close() // no final reply: the client cannot know the message was kept
		return errors.New("cut")
	}
	if wait := s.e.o.Latency + rule.Delay; wait > 0 {
		time.Sleep(wait)
	}
	if rule.Code != 0 {
		return replyError(rule)
	}
	return nil
}

func (s *session) Reset() {
	s.from, s.to, s.rule = "", nil, Rule{}
}

func (s *session) Logout() error {
	s.e.mu.Lock()
	s.e.open--
	delete(s.e.conns, s.conn)
	s.e.mu.Unlock()
	return nil
}

// DropConnections closes every open SMTP connection, as a server does to
// the ones idle past its timeout.
func (e *Emulator) DropConnections() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for c := range e.conns {
		c.Conn().Close()
	}
}

// Connections returns the number of SMTP connections since Start and the
// most that were open at once.
func (e *Emulator) Connections() (total, maxOpen int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sessions, e.maxOpen
}

// parse reads what a message's reader would show: its headers, and its
// plain-text and HTML parts (quoted-printable decoded).
func parse(raw []byte) Message {
	m := Message{Headers: map[string]string{}}
	msg, err := netmail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return m
	}
	var dec mime.WordDecoder
	for k, v := range msg.Header {
		if len(v) > 0 {
			if d, err := dec.DecodeHeader(v[0]); err == nil {
				m.Headers[k] = d
			} else {
				m.Headers[k] = v[0]
			}
		}
	}
	m.MessageID, m.Subject = m.Headers["Message-Id"], m.Headers["Subject"]
	parts(msg.Header.Get("Content-Type"), msg.Body, &m)
	return m
}

func parts(contentType string, body io.Reader, m *Message) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = "text/plain"
	}
	if strings.HasPrefix(mt, "multipart/") {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				return
			}
			parts(p.Header.Get("Content-Type"), p, m) // quoted-printable is decoded by NextPart
		}
	}
	b, _ := io.ReadAll(io.LimitReader(body, 1<<20))
	switch mt {
	case "text/plain":
		m.Text = string(b)
	case "text/html":
		m.HTML = string(b)
	}
}

// slogLogger is go-smtp's error log on slog, at debug level.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Printf(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s slogLogger) Println(v ...any)               { s.l.Debug(fmt.Sprint(v...)) }

// Shutdown stops accepting and waits for sessions until ctx.
func (e *Emulator) Shutdown(ctx context.Context) error {
	return errors.Join(e.srv.Shutdown(ctx), e.httpSrv.Shutdown(ctx))
}
