// Command chaos is herald's nemesis suite (issue 33): the whole pipeline,
// each role its own process — herald api, two dedupe, two route, two APNs
// sink instances, the FCM, Web Push, feed and webhook sinks, the audit
// writer — on the local replicated Kafka cluster (scripts/kafka/kafka
// cluster: three KRaft nodes, replication factor 3, min.insync.replicas
// 2), a chDB ClickHouse server of its own and in-process provider
// emulators (APNs, FCM, Web Push, a webhook receiver), under an open-model
// load through the HTTP API (client retries with the same idempotency key,
// repeated dedupe keys, multi-recipient and device-targeted sends, a
// registered send.completed webhook endpoint), while a nemesis injects
// faults at random from a printed seed, each logged with its time. Then
// it stops the faults, lets the pipeline drain and checks, each as a
// figure:
//
//   - every notification a 202 named is decided, none accepted twice, no
//     source position (topic, partition, offset) of the dedupe or route
//     stage decided twice, every accepted notification routed;
//   - every queued delivery reached its device (a 2xx at the emulator,
//     per delivery for APNs and FCM, per subscription for Web Push, whose
//     requests carry no id), or has an outcome saying why not; every
//     accepted notification's send.completed reached the endpoint;
//   - no device (nor the endpoint) got a notification twice unless an
//     ambiguous attempt of it is on record (those are counted);
//   - ClickHouse holds every request, decision, attempt and outcome of the
//     topics exactly once (by Kafka position) and the hourly roll-ups
//     count exactly what the topics hold;
//   - a read_committed consumer that ran through the faults saw no record
//     that the committed log does not hold (an aborted read) and each
//     delivery command once;
//   - no transaction holds a herald partition at the end (last stable
//     offset = high watermark, internal/txnhold) and none of the run's
//     transactional ids is open past its timeout;
//   - no role exited by itself.
//
// Faults: SIGKILL and restart of a role, SIGSTOP of a role past its
// session and transaction timeouts (10 s each: a zombie that must be
// fenced), SIGKILL of the ClickHouse server (restarted on the same data),
// provider faults at the emulators (a reset after the request was read,
// 5xx, 429 with Retry-After, an answer slower than the sinks' call
// timeout), latency above the request timeout (a 12-20 s round trip) and
// cuts (every byte dropped, then the connections closed) between one role
// and the brokers — toxiproxy, in this process, on the cluster's VIA
// listeners, for the roles --proxied names: their produce, EndTxn, fetch
// and heartbeat requests arrive late or not at all — one at a time; and
// meanwhile, one at a time and --broker-gap apart, hard (SIGKILL) and
// clean (SIGTERM) bounces and SIGSTOPs (35-45 s, past the clients' request
// timeout) of a broker, a third of the time the leader of a herald.seen or
// herald.accepted partition, a third the transaction coordinator of a
// running stage (kadm FindTxnCoordinators for a transactional id of the
// run's roles). Never two brokers down.
//
// At the end of the load it prints the sends/s offered and answered, the
// latency to the 202, and the CPU the brokers, the roles and the driver
// used meanwhile (--faults=false: the load alone, to see what the machine
// sustains).
//
// Not part of go test: run it from the repository with
//
//	go run ./scripts/chaos --duration 90s --rate 60 --seed 1
//
// It starts the cluster (scripts/kafka/kafka cluster start) and stops it
// at the end unless it was already running (--keep-cluster keeps it
// either way); every run uses topics, transactional ids and a ClickHouse
// database of its own. Every process's log: --dir (a new temporary
// directory by default). Exit status 0 when every check holds, 1 when one
// fails, 2 when the run could not be set up. ^C stops everything it
// started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/chdb"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sinks/apns/emulator"
	fcmemulator "github.com/heraldhq/herald/sinks/fcm/emulator"
	whemulator "github.com/heraldhq/herald/sinks/webhook/emulator"
	"github.com/heraldhq/herald/sinks/webpush"
	wpemulator "github.com/heraldhq/herald/sinks/webpush/emulator"
	"github.com/heraldhq/herald/topics"
)

// callTimeout is the sinks' --call-timeout.
const callTimeout = 5 * time.Second

type config struct {
	seed           uint64
	duration       time.Duration
	rate           float64
	recipients     int
	partitions     int
	dir            string
	bin            string
	keepCluster    bool
	brokerFaults   bool
	brokerGap      time.Duration
	killsPerKind   int
	drainPatience  time.Duration
	clusterBrokers string
	clusterBase    int
	proxied        string
	batchInterval  time.Duration
	faults         bool
}

func main() {
	var c config
	flag.Uint64Var(&c.seed, "seed", 0, "seed of the load and the nemesis (0: from the clock; printed)")
	flag.DurationVar(&c.duration, "duration", 90*time.Second, "how long the faults run")
	flag.Float64Var(&c.rate, "rate", 15, "sends per second (open model)")
	flag.IntVar(&c.recipients, "recipients", 200, "recipients, each with an iPhone; every second one also an Android phone")
	flag.IntVar(&c.partitions, "partitions", 4, "partitions of every herald topic")
	flag.StringVar(&c.dir, "dir", "", "directory of the processes' logs and ClickHouse's data (default: a new temporary one)")
	flag.StringVar(&c.bin, "herald", "", "herald binary (default: go build ./cmd/herald into --dir)")
	flag.BoolVar(&c.keepCluster, "keep-cluster", false, "leave the Kafka cluster running at the end")
	flag.BoolVar(&c.brokerFaults, "broker-faults", true, "bounce, kill and pause brokers")
	flag.DurationVar(&c.brokerGap, "broker-gap", 45*time.Second, "least time between two broker faults (a JVM restart costs most of a core)")
	flag.DurationVar(&c.drainPatience, "drain", 5*time.Minute, "how long the pipeline may take to drain after the faults")
	flag.StringVar(&c.clusterBrokers, "brokers", "127.0.0.1:39201,127.0.0.1:39202,127.0.0.1:39203", "the cluster's brokers")
	flag.IntVar(&c.clusterBase, "cluster-base-port", 39200, "the cluster's HERALD_KAFKA_CLUSTER_BASE_PORT (its VIA listeners are found from it)")
	flag.StringVar(&c.proxied, "proxied", "dedupe-1,route-1,sink-apns-1", "roles (at most three) whose broker connections go through toxiproxy, for latency and cut faults (empty: none)")
	flag.DurationVar(&c.batchInterval, "batch-interval", 100*time.Millisecond, "the stages' and sinks' --batch-interval (longer: fewer transactions, less broker CPU a send)")
	flag.IntVar(&c.killsPerKind, "kills-per-kind", 5, "SIGKILLs of each role kind within --duration (the kills are spaced to fit)")
	flag.BoolVar(&c.faults, "faults", true, "inject faults (false: the load alone, to measure what the machine sustains)")
	flag.Parse()
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano() % 1_000_000)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, c)
	if err != nil {
		log.Printf("chaos: %v", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// repoRoot finds the module root from the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "kafka", "kafka")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run it from herald's repository (scripts/kafka/kafka not found)")
		}
		dir = parent
	}
}

func run(ctx context.Context, c config) (bool, error) {
	started := time.Now()
	logf := func(format string, args ...any) {
		fmt.Printf("%s %6.1fs  %s\n", time.Now().UTC().Format("15:04:05"), time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	root, err := repoRoot()
	if err != nil {
		return false, err
	}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "herald-chaos-"); err != nil {
			return false, err
		}
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return false, err
	}
	logf("seed %d, duration %v, rate %.0f/s, logs in %s", c.seed, c.duration, c.rate, c.dir)
	if c.bin == "" {
		c.bin = filepath.Join(c.dir, "herald")
		build := exec.Command("go", "build", "-o", c.bin, "./cmd/herald")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return false, fmt.Errorf("build herald: %v\n%s", err, out)
		}
	}
	rng := rand.New(rand.NewPCG(c.seed, 0x5eed))
	brokers := strings.Split(c.clusterBrokers, ",")

	// The cluster.
	cl := &cluster{script: filepath.Join(root, "scripts", "kafka", "kafka"), log: filepath.Join(c.dir, "kafka-cluster.log")}
	wasRunning := exec.Command(cl.script, "cluster", "status").Run() == nil
	if err := cl.run("start"); err != nil {
		return false, err
	}
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	cleanups = append(cleanups, func() {
		for _, n := range []string{"1", "2", "3"} {
			_ = cl.run("resume", n) // a node a fault left paused
		}
		if wasRunning || c.keepCluster {
			_ = cl.run("start") // a node the run left down
			return
		}
		logf("stopping the cluster")
		_ = cl.run("stop")
	})
	logf("the cluster is up (it was %s)", map[bool]string{true: "already running", false: "started"}[wasRunning])

	// Topics of this run's own.
	prefix := fmt.Sprintf("chaos%d-%d.", c.seed, time.Now().Unix()%100000)
	cat := topics.New(topics.Options{Prefix: prefix, Partitions: int32(c.partitions), Replication: 3})
	kafkaArgs := []string{"--brokers", c.clusterBrokers, "--topic-prefix", prefix, "--partitions", fmt.Sprint(c.partitions), "--replication", "3"}
	if out, err := exec.CommandContext(ctx, c.bin, append([]string{"topics", "create"}, kafkaArgs...)...).CombinedOutput(); err != nil {
		return false, fmt.Errorf("topics create: %v\n%s", err, out)
	}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return false, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	// ClickHouse: a chDB server of the run's own.
	lib, err := chdb.FindLib()
	if err != nil {
		return false, err
	}
	tcpPort, _ := listenPort()
	httpPort, _ := listenPort()
	chOpts := chdb.ServeOptions{Path: filepath.Join(c.dir, "clickhouse"), TCPPort: tcpPort, HTTPPort: httpPort, LibPath: lib,
		MaxMemoryMB: 1024, StartTimeout: 2 * time.Minute, PortWait: 30 * time.Second, LogLevel: "error"}
	chLog, err := os.OpenFile(filepath.Join(c.dir, "clickhouse.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return false, err
	}
	defer chLog.Close()
	chOpts.Stderr = chLog
	chProc, err := chdb.Spawn(context.Background(), c.bin, chOpts)
	if err != nil {
		return false, fmt.Errorf("clickhouse: %w", err)
	}
	// chMu guards chProc: the nemesis kills and restarts it, the
	// supervisor restarts it when it exits by itself.
	var chMu sync.Mutex
	cleanups = append(cleanups, func() { chMu.Lock(); _ = chProc.Stop(); chMu.Unlock() })
	chAddr := chProc.TCPAddr()
	chRestart := func() error {
		sleep(context.Background(), 2*time.Second)
		p, err := chdb.Spawn(context.Background(), c.bin, chOpts)
		if err != nil {
			return err
		}
		chProc = p
		return nil
	}
	chKill := func() error {
		chMu.Lock()
		defer chMu.Unlock()
		_ = syscall.Kill(chProc.Pid(), syscall.SIGKILL)
		<-chProc.Exited()
		return chRestart()
	}
	// chExits records the ClickHouse server's exits the nemesis did not
	// cause (chDB is the test's infrastructure, not herald: printed, and
	// the audit checks show what they cost); it is started again.
	var chExits []string
	chSupervise := func() {
		chMu.Lock()
		defer chMu.Unlock()
		select {
		case <-chProc.Exited():
		default:
			return
		}
		chExits = append(chExits, fmt.Sprintf("at %s; its output ends with: %s", time.Now().UTC().Format(time.TimeOnly), lastLine(chProc.Output())))
		logf("the ClickHouse server exited by itself (its log: %s); starting it again", chLog.Name())
		if err := chRestart(); err != nil {
			logf("ClickHouse restart: %v", err)
		}
	}
	logf("ClickHouse is up on %s", chAddr)

	// The provider emulators, in this process: the checks read what they
	// received, the nemesis scripts their answers.
	apnsEm, err := emulator.Start(emulator.Options{MaxRecords: 0})
	if err != nil {
		return false, err
	}
	defer apnsEm.Close()
	caFile := filepath.Join(c.dir, "apns-ca.pem")
	if err := os.WriteFile(caFile, apnsEm.CertPEM(), 0o600); err != nil {
		return false, err
	}
	fcmEm, err := fcmemulator.Start(fcmemulator.Options{MaxRecords: 0})
	if err != nil {
		return false, err
	}
	defer fcmEm.Close()
	fcmCreds := filepath.Join(c.dir, "fcm.json")
	if err := os.WriteFile(fcmCreds, fcmEm.ServiceAccountJSON(), 0o600); err != nil {
		return false, err
	}

	wpEm, err := wpemulator.Start(wpemulator.Options{MaxRecords: 0})
	if err != nil {
		return false, err
	}
	defer wpEm.Close()
	vapidPublic, vapidPrivate, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		return false, err
	}
	const hookSecret = "whsec_Y2hhb3MtY2hhb3MtY2hhb3MtY2hhb3MtY2hhb3M="
	whEm, err := whemulator.Start(whemulator.Options{Secrets: []string{hookSecret}, MaxRecords: 0})
	if err != nil {
		return false, err
	}
	defer whEm.Close()

	// The roles.
	const key = "k-chaos"
	keys := filepath.Join(c.dir, "api-keys")
	if err := os.WriteFile(keys, []byte("chaos:chaos:"+api.HashKey(key)+"\n"), 0o600); err != nil {
		return false, err
	}
	apiPort, _ := listenPort()
	apiURL := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	id := strings.TrimSuffix(prefix, ".")
	batch := []string{"--batch-interval", c.batchInterval.String()}
	sinkArgs := append([]string{"--call-timeout", callTimeout.String(), "--backoff-max", "5s"}, batch...)
	type spec struct {
		name, kind string
		args       []string
	}
	specs := []spec{
		{"audit-writer", "audit-writer", []string{"audit-writer", "--clickhouse-addr", chAddr, "--database", "chaos", "--migrate", "--flush-interval", "500ms"}},
		{"api", "api", []string{"api", "--listen", fmt.Sprintf("127.0.0.1:%d", apiPort), "--api-keys", keys, "--instance-id", "api-" + id, "--webhook-allow-private"}},
		{"dedupe-1", "dedupe", append([]string{"dedupe", "--instance-id", "dedupe-1-" + id}, batch...)},
		{"dedupe-2", "dedupe", append([]string{"dedupe", "--instance-id", "dedupe-2-" + id}, batch...)},
		{"route-1", "route", append([]string{"route", "--instance-id", "route-1-" + id}, batch...)},
		{"route-2", "route", append([]string{"route", "--instance-id", "route-2-" + id}, batch...)},
		{"sink-apns-1", "sink apns", append([]string{"sink", "--channel", "apns", "--instance-id", "apns-1-" + id,
			"--apns-host", apnsEm.URL(), "--apns-ca-file", caFile, "--apns-topic", "com.example.chaos"}, sinkArgs...)},
		{"sink-apns-2", "sink apns", append([]string{"sink", "--channel", "apns", "--instance-id", "apns-2-" + id,
			"--apns-host", apnsEm.URL(), "--apns-ca-file", caFile, "--apns-topic", "com.example.chaos"}, sinkArgs...)},
		{"sink-fcm", "sink fcm", append([]string{"sink", "--channel", "fcm", "--instance-id", "fcm-" + id,
			"--fcm-credentials-file", fcmCreds, "--fcm-endpoint", fcmEm.URL() + "/v1"}, sinkArgs...)},
		{"sink-feed", "sink feed", append([]string{"sink", "--channel", "feed", "--instance-id", "feed-" + id}, sinkArgs...)},
		{"sink-webpush", "sink webpush", append([]string{"sink", "--channel", "webpush", "--instance-id", "webpush-" + id,
			"--webpush-vapid-public-key", vapidPublic, "--webpush-vapid-private-key", vapidPrivate, "--webpush-subscriber", "mailto:chaos@herald.invalid"}, sinkArgs...)},
		{"sink-webhook", "sink webhook", append([]string{"sink", "--channel", "webhook", "--instance-id", "webhook-" + id, "--webhook-allow-private"}, sinkArgs...)},
	}
	var proxiedNames []string
	if c.proxied != "" {
		proxiedNames = strings.Split(c.proxied, ",")
	}
	proxies, stopProxies, err := startProxies(c.clusterBase, proxiedNames)
	if err != nil {
		return false, err
	}
	cleanups = append(cleanups, stopProxies)
	var roles []*role
	byName := map[string]*role{}
	for _, s := range specs {
		args := append(s.args, kafkaArgs...)
		if p, ok := proxies[s.name]; ok {
			// A later --brokers wins: the role reaches the cluster only
			// through its proxies.
			args = append(args, "--brokers", p.brokers)
		}
		r, err := newRole(c.dir, c.bin, s.name, s.kind, args...)
		if err != nil {
			return false, err
		}
		roles = append(roles, r)
		byName[s.name] = r
	}
	cleanups = append(cleanups, func() {
		logf("stopping every role")
		for _, r := range roles {
			r.stop()
		}
	})
	// The audit writer first (--migrate), then the API: devices are
	// registered before the route stage starts.
	for _, n := range []string{"audit-writer", "api"} {
		if err := byName[n].start(); err != nil {
			return false, err
		}
		if err := byName[n].awaitReady(ctx, 3*time.Minute); err != nil {
			return false, err
		}
	}
	// Keep-alive connections for every send in flight: the default keeps
	// two idle ones, so each answer past those closed its connection and
	// the next send opened one (a TCP handshake and a TIME_WAIT a send).
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = maxInFlight
	client := &sdk.Client{HTTPClient: &http.Client{Transport: transport}, BaseURL: apiURL, APIKey: key, MaxAttempts: 30, AttemptTimeout: 15 * time.Second,
		MinBackoff: 200 * time.Millisecond, MaxBackoff: 3 * time.Second}
	l := &load{client: client, rate: c.rate, rng: rng, acked: map[string]int{}}
	for i := range c.recipients {
		r := fmt.Sprintf("user-%d", i)
		l.recipients = append(l.recipients, r)
		devs := []device{{recipient: r, id: "iphone", platform: sdk.PlatformIOS, token: fmt.Sprintf("%064x", i)}}
		if i%2 == 0 {
			devs = append(devs, device{recipient: r, id: "pixel", platform: sdk.PlatformAndroid, token: fmt.Sprintf("fcm-token-%d", i)})
		}
		for _, d := range devs {
			if _, err := client.RegisterDevice(ctx, r, d.id, sdk.DeviceRegistration{Platform: d.platform, Token: d.token}); err != nil {
				return false, fmt.Errorf("register %s/%s: %w", r, d.id, err)
			}
			l.devices = append(l.devices, d)
		}
	}
	// Web Push subscriptions: the API takes https endpoints only, the
	// emulator serves http, so they go to herald.devices directly (as the
	// API would write them).
	devProducer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(cat.Partitioner()))
	if err != nil {
		return false, err
	}
	for i := 0; i < c.recipients; i += 4 {
		r := l.recipients[i]
		sub, err := wpEm.Subscribe(r)
		if err != nil {
			return false, err
		}
		now := time.Now().UnixMilli()
		b, err := schemas.Encode(&schemas.Device{Tenant: "chaos", Recipient: r, DeviceID: "browser", Platform: sdk.PlatformWeb,
			WebPush: sub, Enabled: true, CreatedAt: now, UpdatedAt: now})
		if err != nil {
			return false, err
		}
		rec := &kgo.Record{Topic: cat.Name(topics.Devices), Key: []byte(schemas.DeviceKey("chaos", r, "browser")), Value: b}
		if err := devProducer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return false, fmt.Errorf("register %s/browser: %w", r, err)
		}
		l.devices = append(l.devices, device{recipient: r, id: "browser", platform: sdk.PlatformWeb})
	}
	devProducer.Close()
	if _, err := client.SetWebhook(ctx, "chaos-hook", sdk.WebhookUpdate{URL: whEm.EndpointURL("chaos"), Events: []string{"send.completed"}, Secret: hookSecret}); err != nil {
		return false, fmt.Errorf("register the webhook endpoint: %w", err)
	}
	logf("%d devices of %d recipients and a webhook endpoint registered", len(l.devices), c.recipients)
	for _, r := range roles {
		if r.starts == 0 {
			if err := r.start(); err != nil {
				return false, err
			}
		}
	}
	for _, r := range roles {
		if err := r.awaitReady(ctx, 3*time.Minute); err != nil {
			return false, err
		}
	}
	logf("every role is ready: %d processes", len(roles))
	clusterDir := os.Getenv("HERALD_KAFKA_CLUSTER_DIR")
	if clusterDir == "" {
		clusterDir = filepath.Join(root, ".cache", "kafka-cluster")
	}
	livePids := func() []int {
		chMu.Lock()
		pids := []int{chProc.Pid()}
		chMu.Unlock()
		for _, r := range roles {
			if p := r.pid(); p != 0 && !r.exited() {
				pids = append(pids, p)
			}
		}
		return pids
	}
	cpuAtStart := sampleCPU(clusterDir, livePids())
	// A role that exits by itself is a failure of the run (its exit is
	// recorded); it is started again so the run goes on.
	superCtx, stopSuper := context.WithCancel(context.Background())
	cleanups = append(cleanups, stopSuper)
	go func() {
		for sleep(superCtx, time.Second) {
			chSupervise()
			for _, r := range roles {
				r.mu.Lock()
				crashed := !r.killing && r.cmd != nil && len(r.crashes) > 0
				r.mu.Unlock()
				if crashed && r.exited() {
					logf("%s exited by itself; starting it again (log %s)", r.name, r.logPath)
					_ = r.start()
				}
			}
		}
	}()

	channels := []string{"apns", "fcm", "feed", "webpush", "webhook"}
	obs, err := newObserver(brokers, cat, channels)
	if err != nil {
		return false, err
	}
	obsCtx, stopObs := context.WithCancel(context.Background())
	obsDone := make(chan struct{})
	go func() { obs.run(obsCtx); close(obsDone) }()
	cleanups = append(cleanups, func() { stopObs(); <-obsDone; obs.cl.Close() })

	// Load and faults.
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	loadStarted := time.Now()
	go func() { l.run(ctx, stopLoad); close(loadDone) }()
	nem := &nemesis{roles: roles, cl: cl, adm: adm, cat: cat, chKill: chKill, proxied: proxies, runID: id,
		providers: map[string]scripted{"apns": apnsEm, "fcm": fcmEm, "webpush": wpEm, "webhook": whEm}, brokers: c.brokerFaults, brokerGap: c.brokerGap,
		killEvery: killEvery(c.duration, c.killsPerKind, roles),
		logf:      logf, counts: map[string]int{}, byRole: map[string]int{}, held: map[*role]bool{}}
	faultCtx, stopFaults := context.WithTimeout(ctx, c.duration)
	defer stopFaults()
	progress := time.NewTicker(15 * time.Second)
	nemDone := make(chan struct{})
	go func() {
		if c.faults {
			nem.run(faultCtx, c.seed)
		} else {
			<-faultCtx.Done()
		}
		close(nemDone)
	}()
	logf("load and faults started")
wait:
	for {
		select {
		case <-nemDone:
			break wait
		case <-progress.C:
			logf("sends %d, answered %d, failed %d, skipped %d", l.sends.Load(), l.answered.Load(), l.failed.Load(), l.skipped.Load())
		}
	}
	progress.Stop()
	close(stopLoad)
	logf("faults over; waiting for the sends in flight")
	<-loadDone
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	// Whatever a fault left behind: every role running and continued.
	for _, r := range roles {
		if r.exited() {
			logf("%s is not running at the end of the faults; starting it", r.name)
			_ = r.start()
		}
		_ = r.signal(syscall.SIGCONT)
	}
	logf("load over: %d sends, %d answered 202, %d failed; draining", l.sends.Load(), l.answered.Load(), l.failed.Load())
	loadSeconds := time.Since(loadStarted).Seconds()
	cpu := sampleCPU(clusterDir, livePids()).since(cpuAtStart)
	p50, p99, most := l.percentiles()
	logf("%.0f sends/s offered, %.0f answered 202 a second over %.0f s; latency to the 202 p50 %v, p99 %v, most %v",
		float64(l.sends.Load())/loadSeconds, float64(l.answered.Load())/loadSeconds, loadSeconds, p50.Round(time.Millisecond), p99.Round(time.Millisecond), most.Round(time.Millisecond))
	logf("CPU over the load (%.0f s on %d cores): %v", loadSeconds, runtime.NumCPU(), cpu)

	res := &results{seed: c.seed, duration: c.duration, rate: c.rate, faults: nem.counts, byRole: nem.byRole, load: l}
	acked := l.ackedIDs()
	drainDeadline := time.Now().Add(c.drainPatience)
	for {
		var missing int
		obs.snapshot(func(v *view) { missing = pending(v, acked) })
		if missing == 0 {
			break
		}
		if time.Now().After(drainDeadline) {
			logf("drain: %d notifications or deliveries still without a decision or an outcome after %v", missing, c.drainPatience)
			break
		}
		sleep(ctx, 2*time.Second)
	}
	logf("drained after %v", time.Since(started)-c.duration)
	stopObs()
	<-obsDone
	// The drain waits for what the checks follow (every notification a
	// 202 named decided, every delivery with an outcome), not for the
	// replay decisions of client retries still being written: read the
	// committed log until two reads 5 s apart count the same (seed 22's
	// final read missed three decisions committed after it, which
	// ClickHouse then held).
	var final *view
	for try := 0; ; try++ {
		v, err := readAll(ctx, brokers, cat, channels)
		if err != nil {
			return false, err
		}
		stable := final != nil && maps.Equal(final.byTopic, v.byTopic)
		final = v
		if stable || try == 12 {
			break
		}
		sleep(ctx, 5*time.Second)
	}
	logf("the committed log: %v", final.byTopic)
	res.checkDecisions(final, acked)
	res.checkDeliveries(final, apnsEm, fcmEm)
	res.checkWebPush(final, wpEm)
	res.checkWebhook(final, whEm)
	res.checkObserver(obs.v, final)
	res.checkHanging(ctx, adm, cat, id)
	chSupervise()
	chConn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{chAddr}, DialTimeout: 10 * time.Second})
	if err != nil {
		return false, err
	}
	defer chConn.Close()
	res.checkClickHouse(ctx, chConn, "chaos", final, c.drainPatience, logf)
	for _, r := range roles {
		r.mu.Lock()
		res.crashes = append(res.crashes, r.crashes...)
		r.mu.Unlock()
	}
	res.nemesisFailures = nem.failed
	chMu.Lock()
	res.chExits = chExits
	chMu.Unlock()
	res.print(os.Stdout)
	return res.ok(), nil
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
