package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/sinks/email"
	smtpemulator "github.com/heraldhq/herald/sinks/email/emulator"
)

// emailFlags configure the email adapter. The password is never logged;
// prefer HERALD_EMAIL_SMTP_PASSWORD to the flag.
type emailFlags struct {
	host, tls, caFile, username, password, auth, helo string
	from, messageIDDomain, unsubscribeURL, templates  string
	port, maxConns                                    int
}

func (e *emailFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.host, "email-smtp-host", "", "the SMTP submission server's host")
	fs.IntVar(&e.port, "email-smtp-port", 0, "its port (default 587, 465 with --email-tls implicit)")
	fs.StringVar(&e.tls, "email-tls", email.TLSStartTLS, "starttls (required), opportunistic, implicit (TLS from the start) or none (a local relay only)")
	fs.StringVar(&e.caFile, "email-ca-file", "", "PEM certificates to trust instead of the system's (a relay's or the emulator's)")
	fs.StringVar(&e.username, "email-smtp-username", "", "SMTP AUTH user name (no AUTH without one)")
	fs.StringVar(&e.password, "email-smtp-password", "", "SMTP AUTH password (prefer HERALD_EMAIL_SMTP_PASSWORD)")
	fs.StringVar(&e.auth, "email-smtp-auth", "", "SMTP AUTH mechanism: "+strings.Join(email.AuthMechanisms, ", ")+" (default plain with a user name)")
	fs.StringVar(&e.helo, "email-helo", "", "the name the client greets the server with (default the host's name)")
	fs.StringVar(&e.from, "email-from", "", "the sender, e.g. 'Example <notifications@example.com>'")
	fs.StringVar(&e.messageIDDomain, "email-message-id-domain", "", "the domain of every Message-ID, <deliveryId@DOMAIN> (default the sender's)")
	fs.StringVar(&e.unsubscribeURL, "email-unsubscribe-url", "", "the recipient's preferences page for List-Unsubscribe, with {tenant}, {recipient}, {type}, {notification}, {delivery}; an https URL also gets RFC 8058 one-click (List-Unsubscribe-Post)")
	fs.StringVar(&e.templates, "email-templates", "", `a JSON file of templates: {"default": {"subject","text","html"}, "types": {"TYPE": {...}}} (text/template; html/template for html)`)
	fs.IntVar(&e.maxConns, "email-max-connections", 4, "most SMTP connections open at once (each reused for the next message); a call waits for a free one within --call-timeout, so keep --max-in-flight a small multiple of it")
	atLeast(fs, "email-max-connections", &e.maxConns, 1)
	addCheck(fs, e.check)
}

// check reports every bad email setting that can be seen without a
// channel.
func (e *emailFlags) check() error {
	var errs []error
	if !slices.Contains([]string{email.TLSStartTLS, email.TLSOpportunistic, email.TLSImplicit, email.TLSNone}, e.tls) {
		errs = append(errs, badField("email-tls", "must be starttls, opportunistic, implicit or none, got %q", e.tls))
	}
	if e.port < 0 || e.port > 65535 {
		errs = append(errs, badField("email-smtp-port", "must be in [1, 65535] (0: the TLS mode's), got %d", e.port))
	}
	if e.auth != "" && !slices.Contains(email.AuthMechanisms, e.auth) {
		errs = append(errs, badField("email-smtp-auth", "must be one of %s, got %q", strings.Join(email.AuthMechanisms, ", "), e.auth))
	}
	if e.auth != "" && e.username == "" {
		errs = append(errs, badField("email-smtp-auth", "needs --email-smtp-username"))
	}
	if e.from != "" {
		if err := email.CheckFrom(e.from); err != nil {
			errs = append(errs, badField("email-from", "%v", strings.TrimPrefix(err.Error(), "email: ")))
		}
	}
	if err := email.CheckUnsubscribeURL(e.unsubscribeURL); err != nil {
		errs = append(errs, badField("email-unsubscribe-url", "%v", strings.TrimPrefix(err.Error(), "email: ")))
	}
	if e.caFile != "" {
		if _, err := os.Stat(e.caFile); err != nil {
			errs = append(errs, badField("email-ca-file", "cannot be read: %v", err))
		}
	}
	if e.templates != "" {
		if _, err := e.readTemplates(); err != nil {
			errs = append(errs, badField("email-templates", "%v", strings.TrimPrefix(err.Error(), "email: ")))
		}
	}
	return errors.Join(errs...)
}

func (e *emailFlags) readTemplates() (email.TemplateFile, error) {
	if e.templates == "" {
		return email.TemplateFile{}, nil
	}
	b, err := os.ReadFile(e.templates)
	if err != nil {
		return email.TemplateFile{}, err
	}
	return email.ReadTemplates(b)
}

func (e *emailFlags) provider() (*email.Provider, error) {
	if e.host == "" || e.from == "" {
		return nil, fmt.Errorf("%w: --email-smtp-host and --email-from are required", errUsage)
	}
	c := email.Config{Host: e.host, Port: e.port, TLS: e.tls, Username: e.username, Password: e.password, Auth: e.auth,
		HELO: e.helo, From: e.from, MessageIDDomain: e.messageIDDomain, UnsubscribeURL: e.unsubscribeURL, MaxConns: e.maxConns}
	t, err := e.readTemplates()
	if err != nil {
		return nil, fmt.Errorf("%w: --email-templates: %v", errUsage, err)
	}
	c.Default, c.Templates = t.Default, t.Types
	if e.caFile != "" {
		if c.RootCAs, err = readCAFile("email-ca-file", e.caFile); err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	return email.New(c)
}

// devEmailProvider is the email adapter of `herald dev`, and the SMTP
// emulator it sends to when there is one.
type devEmailProvider struct {
	p  *email.Provider
	em *smtpemulator.Emulator
}

func (d devEmailProvider) close() {
	d.p.Close()
	if d.em != nil {
		d.em.Close()
	}
}

// devEmail starts the local SMTP emulator (unless emulate is false) and
// the adapter that sends to it; note says where messages go.
func devEmail(emulate bool, smtpAddr, httpAddr string, f *emailFlags, log *slog.Logger) (d devEmailProvider, note string, err error) {
	if !emulate {
		if d.p, err = f.provider(); err != nil {
			return d, "", fmt.Errorf("dev: email: %w", err)
		}
		return d, "email " + f.host, nil
	}
	if d.em, err = smtpemulator.Start(smtpemulator.Options{Addr: smtpAddr, HTTPAddr: httpAddr, MaxRecords: 1000,
		Logger: log.With("component", "smtp-emulator")}); err != nil {
		return d, "", fmt.Errorf("dev: %w", err)
	}
	host, port, _ := net.SplitHostPort(d.em.Addr())
	n, _ := strconv.Atoi(port)
	from := f.from
	if from == "" {
		from = "herald dev <dev@herald.invalid>"
	}
	t, err := f.readTemplates()
	if err != nil {
		d.em.Close()
		return d, "", fmt.Errorf("dev: --email-templates: %w", err)
	}
	if d.p, err = email.New(email.Config{Host: host, Port: n, TLS: email.TLSNone, From: from, UnsubscribeURL: f.unsubscribeURL,
		Default: t.Default, Templates: t.Types, MaxConns: f.maxConns}); err != nil {
		d.em.Close()
		return d, "", fmt.Errorf("dev: email: %w", err)
	}
	return d, "smtp emulator " + d.em.Addr() + " (messages: " + d.em.URL() + "/emulator/messages)", nil
}

// runEmulateSMTP implements `herald emulate smtp`: a local SMTP server
// that keeps every message (GET /emulator/messages on --http-addr) with
// fault injection, until SIGINT or SIGTERM. Point a sink at it with
// --email-smtp-host/--email-smtp-port and --email-tls none (or, with
// --tls, starttls and --email-ca-file the certificate it writes to
// --cert-out).
func runEmulateSMTP(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("emulate smtp")
	addr := fs.String("addr", "127.0.0.1:2525", "SMTP address to listen on")
	listenAddr(fs, "addr", addr, false)
	httpAddr := fs.String("http-addr", "127.0.0.1:4040", "address of the inspection API (GET /emulator/messages)")
	listenAddr(fs, "http-addr", httpAddr, false)
	var ff faultFlags
	ff.register(fs, "messages", "the connection cut after the end of data (the message kept, no reply)")
	tempRate := fs.Float64("temp-fail-rate", 0, "share of messages answered 451 4.3.0 after the end of data (not kept), in [0, 1]")
	permRate := fs.Float64("perm-fail-rate", 0, "share of recipients answered 550 5.1.1 (no such mailbox) at RCPT TO, in [0, 1]")
	useTLS := fs.Bool("tls", false, "offer STARTTLS with a self-signed certificate")
	implicitTLS := fs.Bool("implicit-tls", false, "speak TLS from the start (port 465 style) with a self-signed certificate, instead of STARTTLS")
	certOut := fs.String("cert-out", "", "write the STARTTLS certificate (PEM) here, for --email-ca-file")
	certHosts := fs.String("cert-hosts", "", "host names or IPs, comma separated, the certificate names besides 127.0.0.1 and localhost (e.g. a compose service name)")
	username := fs.String("username", "", "require AUTH PLAIN with this user name and --password")
	password := fs.String("password", "", "the AUTH password (prefer HERALD_PASSWORD)")
	addCheck(fs, func() error {
		var errs []error
		for _, r := range []struct {
			name string
			v    float64
		}{{"temp-fail-rate", *tempRate}, {"perm-fail-rate", *permRate}} {
			if !(r.v >= 0 && r.v <= 1) {
				errs = append(errs, badField(r.name, "must be in [0, 1], got %v", r.v))
			}
		}
		if *certOut != "" && !*useTLS && !*implicitTLS {
			errs = append(errs, badField("cert-out", "needs --tls or --implicit-tls"))
		}
		if *useTLS && *implicitTLS {
			errs = append(errs, badField("implicit-tls", "excludes --tls (STARTTLS)"))
		}
		return errors.Join(errs...)
	})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	em, err := smtpemulator.Start(smtpemulator.Options{Addr: *addr, HTTPAddr: *httpAddr, TLS: *useTLS, ImplicitTLS: *implicitTLS, CertHosts: strings.Split(*certHosts, ","),
		Username: *username, Password: *password, Latency: ff.latency, MaxRecords: 10_000})
	if err != nil {
		return err
	}
	defer em.Close()
	em.SetFaults(smtpemulator.Faults{ResetRate: ff.resetRate, SlowRate: ff.slowRate, SlowDelay: ff.slowDelay})
	em.SetFailureRates(*tempRate, *permRate)
	if *certOut != "" {
		if err := os.WriteFile(*certOut, em.CertPEM(), 0o644); err != nil {
			return fmt.Errorf("emulate: write --cert-out: %w", err)
		}
	}
	fmt.Fprintf(stdout, "smtp emulator listening on %s (messages: %s/emulator/messages)\n", em.Addr(), em.URL())
	<-ctx.Done()
	return nil
}
