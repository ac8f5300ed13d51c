package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/ops"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk/web"
)

// runAPI implements `herald api`: the HTTP API for producer services.
//
//	herald api --listen 127.0.0.1:8080 --api-keys /etc/herald/keys
//
// The key file holds one "tenant:name:sha256hex" line per key (see
// `herald api --hash-key KEY` for the hash). Without --api-keys the server
// accepts only the public development key (api.DevAPIKey, tenant "dev"):
// never run that way outside a laptop.
//
// With --clickhouse-addr (and --database) it also serves the dashboard's
// data from the audit record; the page is at /dashboard.
func runAPI(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("api")
	var kf kafkaFlags
	kf.register(fs)
	var pf policyFlags
	pf.register(fs)
	var of opsFlags
	of.register(fs)
	requestFormat := formatFlag(fs, "request-format", "how sends are written to herald.requests: v2 (Protocol Buffers, schemas/recordpb/records.proto) or v1 (JSON, for a rolling upgrade while a dedupe stage of an earlier herald, which reads only JSON, still runs)")
	waitRoute := fs.Bool("wait-for-route", true, "a send with Prefer: wait also waits for the route stage's decisions and answers deliveries[] (false where no route stage runs)")
	host, _ := os.Hostname()
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve HTTP on")
	keysFile := fs.String("api-keys", "", "file of API keys, one 'tenant:name:sha256hex' per line (default: the development key only)")
	hashKey := fs.String("hash-key", "", "print the sha256 hex of this key (for the key file) and exit")
	instance := fs.String("instance-id", host, "this instance's name, unique and stable across restarts (its transactional id)")
	maxBody := fs.Int64("max-body-bytes", 64<<10, "largest request body")
	maxRecipients := fs.Int("max-recipients", 1000, "most recipients in one send")
	maxWait := fs.Duration("max-wait", 30*time.Second, "cap of Prefer: wait=N")
	idemWait := fs.Duration("idempotency-wait", 10*time.Second, "how long a send with an idempotency key waits for the dedupe decision")
	lookback := fs.Duration("lookback", 24*time.Hour, "how far back the notification read model reads")
	linger := fs.Duration("producer-linger", api.DefaultProducerLinger, "how long a send to one recipient waits for others to share its produce request (the broker's cost is per request); 0: none")
	quota := fs.Int64("quota", 0, "accepted notifications per tenant per --quota-window (0: no quota)")
	quotaWindow := fs.Duration("quota-window", time.Minute, "quota window")
	allowPrivate := fs.Bool("webhook-allow-private", false, "accept webhook endpoint URLs at private, loopback and link-local addresses (development and tests only; the webhook sink needs the same flag to call them)")
	demo := fs.Bool("demo", false, "also serve the web client's demo page at / (it sends with an API key typed into the page)")
	var wf webpushFlags
	wf.registerPublic(fs)
	var df dashboardFlags
	df.register(fs)
	notEmpty(fs, "instance-id", instance)
	listenAddr(fs, "listen", listen, false)
	atLeast(fs, "max-body-bytes", maxBody, 1)
	atLeast(fs, "max-recipients", maxRecipients, 1)
	positive(fs, "max-wait", maxWait)
	positive(fs, "idempotency-wait", idemWait)
	positive(fs, "lookback", lookback)
	addCheck(fs, func() error { return checkProducerLinger(*linger) })
	atLeast(fs, "quota", quota, 0)
	positive(fs, "quota-window", quotaWindow)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *hashKey != "" {
		_, err := fmt.Fprintln(stdout, api.HashKey(*hashKey))
		return err
	}
	seeds, kopts, err := kf.connect()
	if err != nil {
		return err
	}
	policy, err := pf.policy()
	if err != nil {
		return err
	}
	keys, err := loadAPIKeys(*keysFile)
	if err != nil {
		return err
	}
	dash, closeDash, err := df.source()
	if err != nil {
		return err
	}
	defer closeDash()
	srv, err := api.New(api.Config{
		Brokers: seeds, ClientOpts: kopts, Catalog: kf.catalog(), Keys: keys, InstanceID: *instance,
		Policy:        policy,
		WaitForRoute:  *waitRoute,
		RequestFormat: schemas.Format(*requestFormat),
		MaxBodyBytes:  *maxBody, MaxRecipients: *maxRecipients, MaxWait: *maxWait, IdempotencyWait: *idemWait,
		Lookback: *lookback, QuotaPerWindow: *quota, QuotaWindow: *quotaWindow, VAPIDPublicKey: wf.public,
		Dashboard: dash, AllowPrivateWebhooks: *allowPrivate, ProducerLinger: producerLinger(*linger),
	})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Close()
	stop, err := of.serve(ops.Check{Name: "api (started, replicas caught up)", Ready: srv.Ready})
	if err != nil {
		return err
	}
	defer stop()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *listen, err)
	}
	// The web client's built files, served beside the API: browsers load
	// them from herald, no Node at run time.
	mux := http.NewServeMux()
	mux.Handle("/", srv)
	mux.Handle("GET "+web.Prefix, web.Handler())
	if *demo {
		mux.Handle("GET /{$}", web.Demo())
	}
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      *maxWait + *idemWait + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	slog.Info("herald api listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// loadAPIKeys reads --api-keys, or returns the public development key set
// (with a warning) when no file is given.
func loadAPIKeys(path string) ([]api.APIKey, error) {
	if path == "" {
		slog.Warn("no --api-keys: accepting only the public development key (tenant dev)")
		return api.DevKeys(), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --api-keys: %v", errUsage, err)
	}
	defer f.Close()
	keys, err := api.ParseKeys(f)
	if err != nil {
		return nil, fmt.Errorf("%w: --api-keys %s: %v", errUsage, path, err)
	}
	return keys, nil
}
