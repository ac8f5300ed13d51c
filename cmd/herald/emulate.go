package main

import (
	"context"
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
	if len(args) == 0 || args[0] != "apns" {
		return fmt.Errorf("%w: herald emulate apns|fcm|webhook|webpush [flags]", errUsage)
	}
	fs := newFlagSet("emulate apns")
	addr := fs.String("addr", "127.0.0.1:2197", "address to listen on")
	latency := fs.Duration("latency", 0, "delay of every answer")
	certOut := fs.String("cert-out", "", "write the emulator's self-signed certificate (PEM) here, for --apns-ca-file")
	resetRate := fs.Float64("reset-rate", 0, "share of pushes answered by a stream reset after the request was read")
	slowRate := fs.Float64("slow-rate", 0, "share of pushes answered only after --slow-delay")
	slowDelay := fs.Duration("slow-delay", time.Minute, "delay of a slow answer (past the sink's call timeout)")
	certHosts := fs.String("cert-hosts", "", "host names or IPs, comma separated, that the certificate names besides 127.0.0.1 and localhost (e.g. a compose service name)")
	requireAuth := fs.Bool("require-auth", false, "answer 403 MissingProviderToken without a bearer token or client certificate")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	em, err := emulator.Start(emulator.Options{Addr: *addr, Latency: *latency, RequireAuth: *requireAuth, MaxRecords: 10_000,
		CertHosts: strings.Split(*certHosts, ","), LogPushes: true})
	if err != nil {
		return err
	}
	defer em.Close()
	em.SetFaults(emulator.Faults{ResetRate: *resetRate, SlowRate: *slowRate, SlowDelay: *slowDelay})
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
	secrets := fs.String("secret", "", "whsec_ secrets to verify with, comma separated (prefer HERALD_SECRET)")
	latency := fs.Duration("latency", 0, "delay of every answer")
	resetRate := fs.Float64("reset-rate", 0, "share of messages answered by a connection reset after the request was read")
	slowRate := fs.Float64("slow-rate", 0, "share of messages answered only after --slow-delay")
	slowDelay := fs.Duration("slow-delay", time.Minute, "delay of a slow answer (past the sink's call timeout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var list []string
	for _, s := range strings.Split(*secrets, ",") {
		if s = strings.TrimSpace(s); s != "" {
			list = append(list, s)
		}
	}
	em, err := whemulator.Start(whemulator.Options{Addr: *addr, Secrets: list, Latency: *latency, MaxRecords: 10_000})
	if err != nil {
		return err
	}
	defer em.Close()
	em.SetFaults(whemulator.Faults{ResetRate: *resetRate, SlowRate: *slowRate, SlowDelay: *slowDelay})
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
	latency := fs.Duration("latency", 0, "delay of every answer")
	resetRate := fs.Float64("reset-rate", 0, "share of pushes answered by a connection reset after the request was read")
	slowRate := fs.Float64("slow-rate", 0, "share of pushes answered only after --slow-delay")
	slowDelay := fs.Duration("slow-delay", time.Minute, "delay of a slow answer (past the sink's call timeout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	em, err := wpemulator.Start(wpemulator.Options{Addr: *addr, Latency: *latency, MaxRecords: 10_000})
	if err != nil {
		return err
	}
	defer em.Close()
	em.SetFaults(wpemulator.Faults{ResetRate: *resetRate, SlowRate: *slowRate, SlowDelay: *slowDelay})
	fmt.Fprintf(stdout, "webpush emulator listening on %s (subscribe: POST %s/emulator/subscribe, pushes: %s/emulator/pushes)\n", em.URL(), em.URL(), em.URL())
	<-ctx.Done()
	return nil
}
