package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/auditwriter"
	"github.com/heraldhq/herald/analytics/dashboard"
	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/chdb"
	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/ops"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/processors/fallback"
	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/sdk/web"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns"
	"github.com/heraldhq/herald/sinks/apns/emulator"
	"github.com/heraldhq/herald/sinks/email"
	"github.com/heraldhq/herald/sinks/feed"
	"github.com/heraldhq/herald/sinks/webhook"
	whemulator "github.com/heraldhq/herald/sinks/webhook/emulator"
	"github.com/heraldhq/herald/topics"
)

// devClickHouseTCPPort is herald dev's ClickHouse native port by default,
// which `herald audit timeline` names when it cannot connect.
const devClickHouseTCPPort = 19000

// devConfig is what `herald dev` runs with.
type devConfig struct {
	stateDir               string
	kafkaPort              int
	httpAddr               string
	chTCPPort, chHTTPPort  int
	chdbLib                string
	database               string
	policy                 policyFlags
	route                  routeFlags
	clickhouseStartTimeout time.Duration
	apiKeys                string
	// apnsEmulator sends APNs pushes to a local emulator at
	// apnsEmulatorAddr; false sends them to Apple with apns.
	apnsEmulator     bool
	apnsEmulatorAddr string
	apns             apnsFlags
	// fcmEmulator sends FCM messages to a local emulator at
	// fcmEmulatorAddr; false sends them to Google with fcm.
	fcmEmulator     bool
	fcmEmulatorAddr string
	fcm             fcmFlags
	// webpush pushes to the subscriptions' push services with the VAPID
	// keys kept in the state dir (made on first start).
	webpush webpushFlags
	// emailEmulator sends email to a local SMTP emulator at
	// emailEmulatorAddr (its messages on emailEmulatorHTTP); false sends
	// it to the server of the --email-* flags.
	emailEmulator                        bool
	emailEmulatorAddr, emailEmulatorHTTP string
	email                                emailFlags
	// webhookEmulatorAddr is where the local webhook receiver listens
	// (endpoints registered at http://ADDR/hooks/NAME; it verifies with
	// every registered endpoint's secret).
	webhookEmulatorAddr string
}

// runDev implements `herald dev`: everything in one process on embedded
// defaults. State lives under --state-dir and is reused by the next start.
func runDev(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("dev")
	var c devConfig
	fs.StringVar(&c.stateDir, "state-dir", ".herald-dev", "folder for kfake's data and ClickHouse's tables")
	fs.IntVar(&c.kafkaPort, "kafka-port", 19092, "port of the embedded Kafka (kfake) on 127.0.0.1")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:8080", "address of the HTTP server (the API, /metrics, /livez, /readyz and its alias /healthz, the dashboard)")
	listenAddr(fs, "http-addr", &c.httpAddr, false)
	fs.IntVar(&c.chTCPPort, "clickhouse-tcp-port", devClickHouseTCPPort, "native port of the embedded ClickHouse (chDB)")
	fs.IntVar(&c.chHTTPPort, "clickhouse-http-port", 18123, "HTTP port of the embedded ClickHouse (chDB)")
	fs.StringVar(&c.chdbLib, "chdb-lib", "", "path of libchdb.so (default: HERALD_CHDB_LIB, then .cache/chdb)")
	fs.StringVar(&c.database, "database", "herald", "ClickHouse database of the audit record")
	c.policy.register(fs)
	c.route.register(fs)
	fs.StringVar(&c.apiKeys, "api-keys", "", "file of API keys, one 'tenant:name:sha256hex' a line (default: the public dev key "+api.DevAPIKey+", tenant dev)")
	fs.DurationVar(&c.clickhouseStartTimeout, "clickhouse-start-timeout", 2*time.Minute, "how long to wait for the ClickHouse server to answer")
	fs.BoolVar(&c.apnsEmulator, "apns-emulator", true, "send APNs pushes to a local emulator (false: to Apple, with the --apns-* flags)")
	fs.StringVar(&c.apnsEmulatorAddr, "apns-emulator-addr", "127.0.0.1:0", "address of the local APNs emulator (its pushes: https://ADDR/emulator/pushes)")
	c.apns.register(fs)
	fs.BoolVar(&c.fcmEmulator, "fcm-emulator", true, "send FCM messages to a local emulator (false: to Google, with the --fcm-* flags)")
	fs.StringVar(&c.fcmEmulatorAddr, "fcm-emulator-addr", "127.0.0.1:0", "address of the local FCM emulator (its messages: http://ADDR/emulator/messages)")
	c.fcm.register(fs)
	fs.BoolVar(&c.emailEmulator, "email-emulator", true, "send email to a local SMTP emulator (false: to the server of the --email-* flags)")
	fs.StringVar(&c.emailEmulatorAddr, "email-emulator-addr", "127.0.0.1:0", "SMTP address of the local SMTP emulator")
	fs.StringVar(&c.emailEmulatorHTTP, "email-emulator-http-addr", "127.0.0.1:0", "address of the SMTP emulator's inspection API (its messages: http://ADDR/emulator/messages)")
	c.email.register(fs)
	fs.StringVar(&c.webhookEmulatorAddr, "webhook-emulator-addr", "127.0.0.1:0", "address of the local webhook receiver (register endpoints at http://ADDR/hooks/NAME; its messages: http://ADDR/emulator/messages)")
	fs.StringVar(&c.webpush.subscriber, "webpush-subscriber", "mailto:dev@herald.invalid", "the VAPID contact of Web Push (the keys are kept in --state-dir)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return dev(ctx, c, stdout)
}

func dev(ctx context.Context, c devConfig, stdout io.Writer) error {
	log := slog.Default().With("cmd", "dev")
	policy, err := c.policy.policy()
	if err != nil {
		return err
	}
	routePolicy, err := c.route.policy()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.stateDir, 0o755); err != nil {
		return fmt.Errorf("dev: state dir: %w", err)
	}
	// Fail early and clearly on a taken HTTP address, before starting anything.
	ln, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		return fmt.Errorf("dev: listen on --http-addr %s: %w", c.httpAddr, err)
	}

	// Kafka.
	k, err := embedded.StartKafka(filepath.Join(c.stateDir, "kafka"), c.kafkaPort)
	if err != nil {
		ln.Close()
		return err
	}
	defer k.Close()
	brokers := k.Brokers()
	cat := topics.New(embedded.CatalogOptions(max(c.policy.window, c.policy.ttl, maxTypeWindow(policy), routeMaxWindow(routePolicy))))
	// One client serves topic set-up and every /healthz.
	admin, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, embedded.ClientOpts()...)...)
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: kafka client: %w", err)
	}
	defer admin.Close()
	if err := ensureTopics(ctx, admin, cat); err != nil {
		ln.Close()
		return err
	}
	log.Info("embedded kafka ready", "brokers", brokers, "topics", len(cat.Topics()),
		"crashed_transactions_aborted", k.AbortedOnStart())

	// ClickHouse.
	exe, err := os.Executable()
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: own executable: %w", err)
	}
	lib := c.chdbLib
	if lib == "" {
		if lib, err = chdb.FindLib(); err != nil {
			ln.Close()
			return err
		}
	}
	ch, err := chdb.Spawn(ctx, exe, chdb.ServeOptions{
		Path: filepath.Join(c.stateDir, "clickhouse"), TCPPort: c.chTCPPort, HTTPPort: c.chHTTPPort,
		LibPath: lib, StartTimeout: c.clickhouseStartTimeout, LogLevel: "error", PortWait: 30 * time.Second,
	})
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: clickhouse: %w", err)
	}
	defer ch.Stop()
	chConn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ch.TCPAddr()}})
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: clickhouse connect: %w", err)
	}
	// Close the pool before the server stops: open connections delay its
	// shutdown (deferred calls run last-in, first-out).
	defer chConn.Close()
	res, err := migrations.Apply(ctx, chConn, migrations.Options{Database: c.database, AppliedBy: "herald dev"})
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: %w", err)
	}
	if len(res.Applied) > 0 {
		log.Info("clickhouse migrations applied", "versions", res.Applied)
	}
	log.Info("embedded clickhouse ready", "native", ch.TCPAddr(), "http", ch.HTTPAddr(), "database", c.database)

	// Stages.
	runCtx, stopStages := context.WithCancel(ctx)
	defer stopStages()
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	goStage := func(name string, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(runCtx); err != nil && runCtx.Err() == nil {
				errc <- fmt.Errorf("dev: %s: %w", name, err)
			}
		}()
	}
	suffix := embedded.TransactionalSuffix()
	// Every stage's instance on kfake: fresh transactional ids per start
	// (defect 2) and an explicit offset reset (defect 4).
	devStage := stage.Instance{Brokers: brokers, InstanceID: "dev" + suffix, ClientOpts: embedded.ClientOpts(), ResetOffsets: embedded.ResetOffsets}
	dedupeStage, err := dedupe.New(dedupe.Options{
		Instance: devStage,
		Catalog:  cat,
		Policy:   policy,
	})
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: dedupe: %w", err)
	}
	goStage("dedupe", dedupeStage.Run)
	routeStage, err := route.New(route.Options{
		Instance: devStage,
		Catalog:  cat,
		Policy:   routePolicy,
	})
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: route: %w", err)
	}
	goStage("route", routeStage.Run)
	var fallbackStage *fallback.Stage
	if len(routePolicy.Chains) > 0 { // --fallback-chains: the later steps
		if fallbackStage, err = fallback.New(fallback.Options{Instance: devStage, Catalog: cat, Types: chainedTypes(routePolicy.Chains)}); err != nil {
			ln.Close()
			return fmt.Errorf("dev: fallback: %w", err)
		}
		goStage("fallback", fallbackStage.Run)
	}

	// The APNs sink, by default against the local emulator.
	apnsProvider, apnsNote, err := devAPNs(c, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer apnsProvider.close()
	// Readiness: every stage assigned and restored, Kafka and ClickHouse
	// answering, the API's replicas caught up (/readyz, /healthz).
	checks := []ops.Check{
		{Name: "kafka (answers)", Ready: func() bool { return pingWithin(admin.Ping) }},
		{Name: "clickhouse (answers /ping)", Ready: func() bool {
			return pingWithin(func(ctx context.Context) error { return pingHTTP(ctx, "http://"+ch.HTTPAddr()+"/ping") })
		}},
		{Name: "dedupe stage (assigned and restored)", Ready: dedupeStage.Ready},
		{Name: "route stage (devices and preferences read, assigned and restored)", Ready: routeStage.Ready},
	}
	if fallbackStage != nil {
		checks = append(checks, ops.Check{Name: "fallback stage and its forwarders (assigned and restored)", Ready: fallbackStage.Ready})
	}
	goSink := func(channel string, p sinks.Provider) error {
		r, err := sinks.New(sinks.Options{
			Instance: devStage,
			Channel:  channel,
			Provider: p,
			Catalog:  cat,
		})
		if err != nil {
			return fmt.Errorf("dev: sink %s: %w", channel, err)
		}
		checks = append(checks, ops.Check{Name: "sink " + channel + " (assigned and restored)", Ready: r.Ready})
		goStage("sink-"+channel, r.Run)
		return nil
	}
	if err := goSink("apns", apnsProvider.p); err != nil {
		ln.Close()
		return err
	}

	// The FCM sink, by default against the local emulator, the Web Push
	// sink with the VAPID keys of the state dir, and the in-app feed.
	fcmProvider, fcmNote, err := devFCM(ctx, c.fcmEmulator, c.fcmEmulatorAddr, &c.fcm, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer fcmProvider.close()
	vapid, err := devVAPIDKeys(c.stateDir)
	if err != nil {
		ln.Close()
		return err
	}
	c.webpush.public, c.webpush.private = vapid.PublicKey, vapid.PrivateKey
	webpushProvider, err := c.webpush.provider()
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: webpush: %w", err)
	}
	defer webpushProvider.CloseIdleConnections()
	// Email, by default to the local SMTP emulator.
	emailProvider, emailNote, err := devEmail(c.emailEmulator, c.emailEmulatorAddr, c.emailEmulatorHTTP, &c.email, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer emailProvider.close()
	for _, s := range []struct {
		channel string
		p       sinks.Provider
	}{{"fcm", fcmProvider.p}, {"webpush", webpushProvider}, {feed.Channel, feed.New(cat)}, {email.Channel, emailProvider.p}} {
		if err := goSink(s.channel, s.p); err != nil {
			ln.Close()
			return err
		}
	}

	// Outbound webhooks (fan-out from herald.outcomes and the sink), and a
	// local receiver that verifies their signatures.
	hooks, err := webhook.NewChannel(webhook.ChannelOptions{Sink: sinks.Options{
		Instance: devStage,
		Catalog:  cat,
	}, AllowPrivate: true}) // the local receiver listens on loopback
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: webhook: %w", err)
	}
	defer hooks.Provider.CloseIdleConnections()
	receiver, err := whemulator.Start(whemulator.Options{Addr: c.webhookEmulatorAddr, SecretsFunc: hooks.Table.Secrets, MaxRecords: 1000,
		Logger: log.With("component", "webhook-emulator")})
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: %w", err)
	}
	defer receiver.Close()
	checks = append(checks, ops.Check{Name: "webhooks (endpoints read; fan-out, decisions forwarder, completion stage and sink assigned and restored)", Ready: hooks.Ready})
	goStage("webhook", func(ctx context.Context) error {
		return hooks.Run(ctx, brokers, embedded.ClientOpts(), log.With("component", "webhook"))
	})

	writer, err := auditwriter.New(auditwriter.Options{
		Brokers: brokers, Catalog: cat, ClickHouse: chConn, Database: c.database, ClientOpts: embedded.ClientOpts(),
	})
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: audit writer: %w", err)
	}
	checks = append(checks, ops.Check{Name: "audit writer (connected to Kafka and ClickHouse)", Ready: writer.Ready})
	goStage("audit-writer", writer.Run)

	// The API.
	keys, err := loadAPIKeys(c.apiKeys)
	if err != nil {
		ln.Close()
		return err
	}
	// The dashboard's queries name their tables unqualified: a pool whose
	// default database is herald's.
	dashConn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ch.TCPAddr()}, Auth: clickhouse.Auth{Database: c.database}})
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: clickhouse connect: %w", err)
	}
	defer dashConn.Close()
	apiSrv, err := api.New(api.Config{
		Brokers: brokers, Catalog: cat, Keys: keys, InstanceID: "dev" + suffix, Policy: policy, WaitForRoute: true, ClientOpts: embedded.ClientOpts(), DashboardDevKey: devDashboardKey(c.apiKeys),
		VAPIDPublicKey: vapid.PublicKey,
		Dashboard:      &dashboard.Source{Conn: dashConn, Database: c.database},
		// The local webhook receiver listens on loopback.
		AllowPrivateWebhooks: true,
	})
	if err != nil {
		ln.Close()
		return fmt.Errorf("dev: api: %w", err)
	}
	if err := apiSrv.Start(ctx); err != nil {
		ln.Close()
		return fmt.Errorf("dev: api: %w", err)
	}
	defer apiSrv.Close()
	checks = append(checks, ops.Check{Name: "api (started, replicas caught up)", Ready: apiSrv.Ready})

	// HTTP.
	srv := &http.Server{Handler: devMux(apiSrv, checks), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("dev: http: %w", err)
		}
	}()
	fmt.Fprintf(stdout, "herald dev is up: http://%s (demo page, API, openapi.json, dashboard, livez, readyz, metrics) · kafka %s · clickhouse native %s, http %s · %s · %s · %s · webhook receiver %s/hooks/NAME (messages: %s/emulator/messages) · state %s\n",
		ln.Addr(), brokers[0], ch.TCPAddr(), ch.HTTPAddr(), apnsNote, fcmNote, emailNote, receiver.URL(), receiver.URL(), c.stateDir)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-errc:
		log.Error("component failed; shutting down", "err", runErr)
	case <-ch.Exited():
		runErr = fmt.Errorf("dev: clickhouse exited (chDB's server ends when a client fails its handshake, e.g. a wrong password "+
			"or another protocol on port %s; see internal/chdb): %s", ch.TCPAddr(), ch.Output())
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	srv.Shutdown(shutCtx)
	stopStages()
	wg.Wait()
	return runErr
}

// devAPNsProvider is the APNs adapter of `herald dev`, and the emulator it
// sends to when there is one.
type devAPNsProvider struct {
	p  *apns.Provider
	em *emulator.Emulator
}

// devMux is herald dev's HTTP server: the API, the operations paths and the
// web client.
func devMux(apiSrv http.Handler, checks []ops.Check) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/", apiSrv)
	// /metrics, /livez and /readyz as every role serves them (internal/ops),
	// a wrong method included (405, not the API's 404); /healthz is /readyz
	// under its older name, in the API's JSON shape (openapi.json): 200
	// {"status":"ok"}, or 503 {"status":"starting"} naming what is not
	// ready.
	opsHandler := ops.Handler(metrics.Default, checks...)
	for _, p := range ops.Paths {
		mux.Handle(p, opsHandler)
	}
	mux.HandleFunc("/healthz", ops.MethodNotAllowed)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if not := ops.NotReady(checks...); len(not) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(map[string]any{"status": "starting", "notReady": not})
			return
		}
		io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	// The web client (service worker and page helper) for browsers.
	mux.Handle("GET "+web.Prefix, web.Handler())
	mux.Handle("GET /{$}", web.Demo())
	return mux
}

func (d devAPNsProvider) close() {
	d.p.CloseIdleConnections()
	if d.em != nil {
		d.em.Close()
	}
}

// devAPNs starts the local APNs emulator (unless --apns-emulator=false) and
// the adapter that sends to it; note says where pushes go.
func devAPNs(c devConfig, log *slog.Logger) (d devAPNsProvider, note string, err error) {
	if !c.apnsEmulator {
		if d.p, err = c.apns.provider(); err != nil {
			return d, "", fmt.Errorf("dev: apns: %w", err)
		}
		return d, "apns " + c.apns.host, nil
	}
	d.em, err = emulator.Start(emulator.Options{Addr: c.apnsEmulatorAddr, MaxRecords: 1000, LogPushes: true, Logger: log.With("component", "apns-emulator")})
	if err != nil {
		return d, "", fmt.Errorf("dev: %w", err)
	}
	d.p, err = apns.New(apns.Config{Host: d.em.URL(), RootCAs: d.em.RootCAs(), Topic: c.apns.topic})
	if err != nil {
		d.em.Close()
		return d, "", fmt.Errorf("dev: apns: %w", err)
	}
	return d, "apns emulator " + d.em.URL() + " (pushes: " + d.em.URL() + "/emulator/pushes)", nil
}

// ensureTopics creates the catalog's topics and checks there is no drift.
func ensureTopics(ctx context.Context, cl *kgo.Client, cat *topics.Catalog) error {
	adm := kadm.NewClient(cl)
	if _, err := cat.Create(ctx, adm); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	drift, err := cat.Verify(ctx, adm)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	if len(drift) > 0 {
		return fmt.Errorf("dev: topics drift from the catalog (was the state dir made with other settings?): %v", drift)
	}
	return nil
}

// pingWithin runs ping with a 3 s bound and reports whether it succeeded:
// a readiness check of a component herald dev talks to.
func pingWithin(ping func(context.Context) error) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return ping(ctx) == nil
}

func pingHTTP(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func maxTypeWindow(p dedupe.Policy) time.Duration {
	var m int64
	for _, w := range p.TypeWindowMs {
		m = max(m, w)
	}
	return time.Duration(m) * time.Millisecond
}

// devDashboardKey is the key the dashboard page fills in: the public
// development key when herald dev accepts it (no --api-keys), else none.
func devDashboardKey(apiKeys string) string {
	if apiKeys != "" {
		return ""
	}
	return api.DevAPIKey
}
