package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/heraldhq/herald/sinks/apns/emulator"
	whemulator "github.com/heraldhq/herald/sinks/webhook/emulator"
	wpemulator "github.com/heraldhq/herald/sinks/webpush/emulator"
)

// runEmulate implements `herald emulate apns`: a local APNs (HTTP/2 over
// TLS) until SIGINT or SIGTERM. Point a sink at it with --apns-host and
// --apns-ca-file; GET /emulator/pushes lists what it received.
func runEmulate(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "fcm" {
		return runEmulateFCM(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "webhook" {
		return runEmulateWebhook(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "webpush" {
		return runEmulateWebPush(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "smtp" {
		return runEmulateSMTP(ctx, args[1:], stdout)
	}
	if len(args) == 0 || args[0] != "apns" {
		return fmt.Errorf("%w: herald emulate apns|fcm|smtp|webhook|webpush [flags]", errUsage)
	}
	fs := newFlagSet("emulate apns")
	addr := fs.String("addr", "127.0.0.1:2197", "address to listen on")
	listenAddr(fs, "addr", addr, false)
	var ff faultFlags
	ff.register(fs, "pushes", "a stream reset")
	certOut := fs.String("cert-out", "", "write the emulator's self-signed certificate (PEM) here, for --apns-ca-file")
	certHosts := fs.String("cert-hosts", "", "host names or IPs, comma separated, that the certificate names besides 127.0.0.1 and localhost (e.g. a compose service name)")
	requireAuth := fs.Bool("require-auth", false, "answer 403 MissingProviderToken without a bearer token or client certificate")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	em, err := emulator.Start(emulator.Options{Addr: *addr, Latency: ff.latency, RequireAuth: *requireAuth, MaxRecords: 10_000,
		CertHosts: strings.Split(*certHosts, ","), LogPushes: true})
	if err != nil {
		return err
	}
	defer em.Close()
	em.SetFaults(emulator.Faults{ResetRate: ff.resetRate, SlowRate: ff.slowRate, SlowDelay: ff.slowDelay})
	if *certOut != "" {
		if err := os.WriteFile(*certOut, em.CertPEM(), 0o644); err != nil {
			return fmt.Errorf("emulate: write --cert-out: %w", err)
		}
	}
	fmt.Fprintf(stdout, "apns emulator listening on %s (pushes: %s/emulator/pushes)\n", em.URL(), em.URL())
	<-ctx.Done()
	return nil
}

// runEmulateWebhook implements `herald emulate webhook`: a local webhook
// receiver (POST /hooks/{endpoint}) that verifies Standard Webhooks
// signatures with --secret, until SIGINT or SIGTERM. Register an endpoint
// with url http://ADDR/hooks/NAME and the same secret; GET
// /emulator/messages lists what it read.
func runEmulateWebhook(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("emulate webhook")
	addr := fs.String("addr", "127.0.0.1:4020", "address to listen on")
	listenAddr(fs, "addr", addr, false)
	secrets := fs.String("secret", "", "whsec_ secrets to verify with, comma separated (prefer HERALD_SECRET; required: every message is verified)")
	var ff faultFlags
	ff.register(fs, "messages", "a connection reset")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var list []string
	for _, s := range strings.Split(*secrets, ",") {
		if s = strings.TrimSpace(s); s != "" {
			list = append(list, s)
		}
	}
	if len(list) == 0 { // required here, not in herald config check: a file serves roles that have no --secret
		return fmt.Errorf("%w: --secret is required: the receiver answers 401 to every message it cannot verify", errUsage)
	}
	em, err := whemulator.Start(whemulator.Options{Addr: *addr, Secrets: list, Latency: ff.latency, MaxRecords: 10_000})
	if err != nil {
		return err
	}
	defer em.Close()
	em.SetFaults(whemulator.Faults{ResetRate: ff.resetRate, SlowRate: ff.slowRate, SlowDelay: ff.slowDelay})
	fmt.Fprintf(stdout, "webhook receiver listening on %s (endpoints: %s/hooks/NAME, messages: %s/emulator/messages)\n", em.URL(), em.URL(), em.URL())
	<-ctx.Done()
	return nil
}

// runEmulateWebPush implements `herald emulate webpush`: a local Web Push
// service that answers RFC 8030's errors with fault injection (pushes at
// POST /push/{subscription}; POST /emulator/subscribe makes a
// subscription; GET /emulator/pushes lists what it read), until SIGINT or
// SIGTERM.
func runEmulateWebPush(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("emulate webpush")
	addr := fs.String("addr", "127.0.0.1:4030", "address to listen on")
	listenAddr(fs, "addr", addr, false)
	var ff faultFlags
	ff.register(fs, "pushes", "a connection reset")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	em, err := wpemulator.Start(wpemulator.Options{Addr: *addr, Latency: ff.latency, MaxRecords: 10_000})
	if err != nil {
		return err
	}
	defer em.Close()
	em.SetFaults(wpemulator.Faults{ResetRate: ff.resetRate, SlowRate: ff.slowRate, SlowDelay: ff.slowDelay})
	fmt.Fprintf(stdout, "webpush emulator listening on %s (subscribe: POST %s/emulator/subscribe, pushes: %s/emulator/pushes)\n", em.URL(), em.URL(), em.URL())
	<-ctx.Done()
	return nil
}

// faultFlags are the fault injection flags every emulator takes.
type faultFlags struct {
	latency, slowDelay  time.Duration
	resetRate, slowRate float64
}

// register adds the flags: what the emulator answers ("pushes"), and
// how a reset reaches the client ("a stream reset").
func (f *faultFlags) register(fs *flag.FlagSet, what, reset string) {
	fs.DurationVar(&f.latency, "latency", 0, "delay of every answer")
	fs.Float64Var(&f.resetRate, "reset-rate", 0, "share of "+what+" answered by "+reset+" after the request was read, in [0, 1]")
	fs.Float64Var(&f.slowRate, "slow-rate", 0, "share of "+what+" answered only after --slow-delay, in [0, 1]")
	fs.DurationVar(&f.slowDelay, "slow-delay", time.Minute, "delay of a slow answer (past the sink's call timeout)")
	addCheck(fs, f.check)
}

func (f *faultFlags) check() error {
	var errs []error
	for _, r := range []struct {
		name string
		v    float64
	}{{"reset-rate", f.resetRate}, {"slow-rate", f.slowRate}} {
		if !(r.v >= 0 && r.v <= 1) {
			errs = append(errs, badField(r.name, "must be in [0, 1], got %v", r.v))
		}
	}
	if f.latency < 0 {
		errs = append(errs, badField("latency", "must not be negative, got %v", f.latency))
	}
	if f.slowDelay <= 0 {
		errs = append(errs, badField("slow-delay", "must be positive, got %v", f.slowDelay))
	}
	return errors.Join(errs...)
}
