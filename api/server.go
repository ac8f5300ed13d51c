package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/dashboard"
	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/ops"
	"github.com/heraldhq/herald/internal/reply"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/webhook"
	"github.com/heraldhq/herald/topics"
)

// Config configures one API server.
type Config struct {
	Brokers []string
	Catalog *topics.Catalog
	// Keys are the accepted API keys (see ParseKeys, DevKeys). Required.
	Keys []APIKey
	// InstanceID names this instance; its transactional id is
	// "herald-api-" + InstanceID. Keep it stable across restarts and unique
	// among running instances: a restart then fences the predecessor's open
	// transaction at once. A random id when empty.
	InstanceID string
	// Policy must match the dedupe stage's: a quota's check evaluates
	// with it (explain asks the stage). dedupe.DefaultPolicy when zero.
	Policy dedupe.Policy
	// WaitForRoute makes a send with Prefer: wait also wait for the route
	// stage's decisions about its accepted notifications and answer their
	// deliveries[]; set it where a route stage runs. A send that waits only
	// because of its idempotency key, and a replay, answer no deliveries
	// (the route stage never sees a replay: it answers the original's ids,
	// statuses and request id, without the deliveries and the route's
	// skips the original may have listed).
	WaitForRoute bool
	// MaxBodyBytes bounds a request body (64 KiB by default).
	MaxBodyBytes int64
	// MaxRecipients bounds the recipients of one send (1000 by default).
	MaxRecipients int
	// MaxWait caps Prefer: wait=N (30 s by default).
	MaxWait time.Duration
	// IdempotencyWait bounds the wait for the dedupe stage's decisions on a
	// send with an idempotency key (10 s by default).
	IdempotencyWait time.Duration
	// Lookback is how far back the read model starts reading requests and
	// decisions (24 h by default), MaxTracked how many notifications it
	// keeps (100 000 by default; the oldest go first). With the audit
	// configured there is no read model: MaxTracked bounds the cache of the
	// instance's own sends (20 000 by default).
	Lookback   time.Duration
	MaxTracked int
	// QuotaPerWindow limits each tenant to that many accepted
	// notifications per QuotaWindow (1 minute by default); 0 means no
	// quota. Only accepted notifications count: duplicates and replays
	// never do.
	QuotaPerWindow int64
	QuotaWindow    time.Duration
	// TransactionTimeout of the producer (10 s by default) and
	// MaxBatchRecords, the most records grouped in one transaction (5000).
	TransactionTimeout time.Duration
	MaxBatchRecords    int
	// ProducerLinger is how long the producer of single records (a send
	// to one recipient) lets a batch fill before sending it: concurrent
	// sends share one produce request, which the broker costs per request,
	// not per record (DefaultProducerLinger when 0; negative: none, one
	// produce request per send at moderate rates). A send's 202 waits for
	// it.
	ProducerLinger time.Duration
	// Now is the clock of sends and explain: a request's record time, the
	// time explain evaluates at, the quota window. time.Now when nil; tests
	// set it to stand exactly at the end of a window.
	Now func() time.Time
	// VAPIDPublicKey is the Web Push application server key served at
	// GET /v1/webpush/vapid-public-key (unpadded base64url); empty when
	// Web Push is not configured.
	VAPIDPublicKey string
	// Dashboard answers the dashboard's JSON endpoints (GET
	// /v1/dashboard/...) from the audit record in ClickHouse; without it
	// they answer 503 dashboard-not-configured. The page (GET /dashboard)
	// is served either way.
	Dashboard *dashboard.Source
	// DashboardDevKey is filled in on the dashboard page's key field: only
	// herald dev's public development key (DevAPIKey), never a real one.
	DashboardDevKey string
	// AllowPrivateWebhooks accepts webhook endpoint URLs that are, or
	// resolve to, private, loopback or link-local addresses (herald dev,
	// tests); refused with a 422 otherwise (webhook.CheckURL).
	AllowPrivateWebhooks bool
	// Resolver looks up webhook endpoint hosts (net.DefaultResolver when
	// nil).
	Resolver webhook.Resolver
	// RequestFormat is how sends are written to herald.requests:
	// schemas.FormatBinary (the zero value: herald.request/v2, Protocol
	// Buffers) or schemas.FormatJSON (herald.request/v1, for a rolling
	// upgrade while a dedupe stage of an earlier herald, which reads only
	// JSON, still runs).
	RequestFormat schemas.Format
	// ClientOpts are added to every Kafka client (e.g. kfake workarounds).
	ClientOpts []kgo.Opt
	Logger     *slog.Logger
	// Metrics receives the request latencies (metrics.Default when nil).
	Metrics *metrics.Registry

	// holdReadModel, in tests, holds the read model's consumer back until
	// it is closed: answers that must not wait for its catch-up are
	// checked while it has read nothing.
	holdReadModel <-chan struct{}
}

func (c *Config) defaults() error {
	if len(c.Brokers) == 0 || c.Catalog == nil {
		return errors.New("api: Brokers and Catalog are required")
	}
	if len(c.Keys) == 0 {
		return errors.New("api: no API keys configured (use ParseKeys, or DevKeys on a laptop)")
	}
	if c.InstanceID == "" {
		c.InstanceID = identity.NewRandomID()[:12]
	}
	c.Policy = c.Policy.OrDefault()
	setDefault(&c.MaxBodyBytes, 64<<10)
	setDefault(&c.MaxRecipients, 1000)
	setDefault(&c.MaxWait, 30*time.Second)
	setDefault(&c.IdempotencyWait, 10*time.Second)
	setDefault(&c.Lookback, 24*time.Hour)
	if c.historyFromAudit() {
		// Only the instance's own sends, for the second or so before the
		// audit holds them (history.go): a smaller default.
		setDefault(&c.MaxTracked, 20_000)
	}
	setDefault(&c.MaxTracked, 100_000)
	setDefault(&c.QuotaWindow, time.Minute)
	setDefault(&c.TransactionTimeout, 10*time.Second)
	setDefault(&c.MaxBatchRecords, 5000)
	if c.ProducerLinger == 0 {
		c.ProducerLinger = DefaultProducerLinger
	}
	if c.ProducerLinger > time.Minute { // franz-go's limit
		return fmt.Errorf("api: ProducerLinger %v is longer than a minute", c.ProducerLinger)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Metrics == nil {
		c.Metrics = metrics.Default
	}
	return nil
}

// DefaultProducerLinger is Config.ProducerLinger's default: at 2,000
// sends/s about 4 sends share a produce request instead of one each
// (docs/benchmarks-history.md, "Requests per send").
const DefaultProducerLinger = 2 * time.Millisecond

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Server is herald's HTTP API: an http.Handler, plus Start and Close for
// the Kafka clients behind it. Mount it anywhere (herald api serves it on
// its own listener; herald dev inside its own).
type Server struct {
	cfg    Config
	log    *slog.Logger
	mux    *http.ServeMux
	routes []route

	requestsT, decisionsT, devicesT, prefsT, segmentsT string
	attemptsT, outcomesT                               string
	// repliesT is herald.replies; replyPartition the one partition of it
	// this instance reads (set by Start), named on every request record
	// whose caller waits (internal/reply).
	repliesT       string
	replyPartition int32
	feedT          string
	webhooksT      string
	receiptsT      string

	w   *writer
	tr  *tracker
	rep *replica
	// readMarks: the feed's read marks this instance wrote, laid over the
	// audit's answers until it has them (feed.go).
	readMarks readMarks

	// waitedComplete and waitedIncomplete time what a waiting send
	// (Prefer: wait, or an idempotency key) waits after its commit for its
	// decisions: all of them arrived, or not in time.
	waitedComplete, waitedIncomplete *metrics.Histogram

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	clients []*kgo.Client

	// kafka checks, for Ready, that a broker answers.
	kafka ops.KafkaProbe
}

// route is one operation of the API; the OpenAPI document lists exactly
// these.
type route struct {
	method, pattern string
	public          bool // no API key needed
	handle          func(s *Server, w http.ResponseWriter, r *http.Request, p principal)
}

// New builds a server; call Start before serving requests that touch
// Kafka (until then they answer 503).
func New(cfg Config) (*Server, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	cat := cfg.Catalog
	s := &Server{
		cfg: cfg, log: cfg.Logger.With("component", "api"),
		requestsT: cat.Name(topics.Requests), decisionsT: cat.Name(topics.Decisions),
		devicesT: cat.Name(topics.Devices), prefsT: cat.Name(topics.Preferences), segmentsT: cat.Name(topics.Segments),
		attemptsT: cat.Name(topics.Attempts), outcomesT: cat.Name(topics.Outcomes),
		repliesT: cat.Name(topics.Replies),
	}
	s.kafka.Client = s.replicaClient
	s.tr = newTracker(cfg.MaxTracked, cfg.QuotaWindow)
	s.tr.ownOnly = cfg.historyFromAudit()
	const waitHelp = "time a send waiting for its decisions (Prefer: wait, or an idempotency key) waited after its commit; result=complete when every decision arrived in time"
	s.waitedComplete = cfg.Metrics.Histogram("herald_api_decision_wait_seconds", waitHelp, metrics.LatencyBuckets, "result", "complete")
	s.waitedIncomplete = cfg.Metrics.Histogram("herald_api_decision_wait_seconds", waitHelp, metrics.LatencyBuckets, "result", "incomplete")
	seenT := "" // the seen-set copy serves the quota only (explain asks the stage)
	if cfg.QuotaPerWindow > 0 {
		seenT = cat.Name(topics.Seen)
	}
	s.rep = newReplica(seenT, s.devicesT, s.prefsT, s.segmentsT)
	s.feedT = cat.Name(topics.Feed)
	s.receiptsT = cat.Name(topics.Receipts)
	if !cfg.historyFromAudit() {
		s.rep.feedT = s.feedT // else the feed is read from the audit (feed.go)
	}
	s.readMarks.max = cfg.MaxTracked
	s.webhooksT = cat.Name(topics.Webhooks)
	s.rep.webhooksT = s.webhooksT
	s.w = newWriter(s.newProducer, cfg.MaxBatchRecords, cfg.TransactionTimeout+5*time.Second, s.log, cfg.Metrics)
	s.w.newPlain = s.newPlainProducer
	s.routes = apiRoutes()
	s.mux = http.NewServeMux()
	allowed := map[string][]string{}
	for _, rt := range s.routes {
		rt := rt
		s.mux.HandleFunc(rt.method+" "+rt.pattern, func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, rt) })
		allowed[rt.pattern] = append(allowed[rt.pattern], rt.method)
	}
	for pattern, methods := range allowed {
		sort.Strings(methods)
		allow := strings.Join(methods, ", ")
		s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			p := newProblem(http.StatusMethodNotAllowed, probMethod, "Method not allowed", r.Method+" is not allowed here; use "+allow)
			p.header = http.Header{"Allow": {allow}}
			writeProblem(w, p)
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, notFound("path "+r.URL.Path))
	})
	return s, nil
}

func apiRoutes() []route {
	return []route{
		{"GET", "/openapi.json", true, (*Server).getOpenAPI},
		{"GET", "/healthz", true, (*Server).getHealth},
		{"GET", "/dashboard", true, (*Server).getDashboardPage},
		{"GET", "/dashboard/assets/{name}", true, (*Server).getDashboardAsset},
		{"GET", "/v1/dashboard/hit-rate", false, (*Server).getDashboardHitRate},
		{"GET", "/v1/dashboard/decisions", false, (*Server).getDashboardDecisions},
		{"GET", "/v1/dashboard/attempts", false, (*Server).getDashboardAttempts},
		{"GET", "/v1/dashboard/outcomes", false, (*Server).getDashboardOutcomes},
		{"GET", "/v1/dashboard/shown-twice", false, (*Server).getDashboardShownTwice},
		{"GET", "/v1/dashboard/notifications/{id}/timeline", false, (*Server).getDashboardTimeline},
		{"POST", "/v1/notifications", false, (*Server).postNotifications},
		{"GET", "/v1/notifications/{id}", false, (*Server).getNotification},
		{"POST", "/v1/explain", false, (*Server).postExplain},
		{"GET", "/v1/users/{userId}/devices", false, (*Server).listDevices},
		{"GET", "/v1/users/{userId}/devices/{deviceId}", false, (*Server).getDevice},
		{"PUT", "/v1/users/{userId}/devices/{deviceId}", false, (*Server).putDevice},
		{"DELETE", "/v1/users/{userId}/devices/{deviceId}", false, (*Server).deleteDevice},
		{"GET", "/v1/users/{userId}/preferences", false, (*Server).getPreferences},
		{"PUT", "/v1/users/{userId}/preferences", false, (*Server).putPreferences},
		{"DELETE", "/v1/users/{userId}/preferences", false, (*Server).deletePreferences},
		{"GET", "/v1/segments/{name}", false, (*Server).getSegment},
		{"PUT", "/v1/segments/{name}", false, (*Server).putSegment},
		{"DELETE", "/v1/segments/{name}", false, (*Server).deleteSegment},
		{"GET", "/v1/webhooks", false, (*Server).listWebhooks},
		{"GET", "/v1/webhooks/{webhookId}", false, (*Server).getWebhook},
		{"PUT", "/v1/webhooks/{webhookId}", false, (*Server).putWebhook},
		{"DELETE", "/v1/webhooks/{webhookId}", false, (*Server).deleteWebhook},
		{"GET", "/v1/webpush/vapid-public-key", true, (*Server).getVAPIDPublicKey},
		{"GET", "/v1/recipients/{recipientId}/feed", false, (*Server).getFeed},
		{"GET", "/v1/deadletters", false, (*Server).listDeadLetters},
		{"GET", "/v1/deadletters/{id}", false, (*Server).getDeadLetter},
		{"POST", "/v1/deadletters:redrive", false, (*Server).postDeadLettersRedrive},
		{"POST", "/v1/recipients/{recipientId}/feed/{notificationId}/read", false, (*Server).postFeedRead},
		{"POST", "/v1/recipients/{recipientId}/feed/read-all", false, (*Server).postFeedReadAll},
		// Device routes: authenticated by the device's receipt token, not an
		// API key (deviceAuth).
		{"POST", "/v1/receipts", true, (*Server).postReceipt},
		{"PUT", "/v1/device/webpush", true, (*Server).putDeviceWebPush},
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if cors(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// statusWriter remembers the status for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (sw *statusWriter) WriteHeader(code int) {
	if sw.status == 0 {
		sw.status = code
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Write(b []byte) (int, error) {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	return sw.ResponseWriter.Write(b)
}

// serve authenticates, runs one route, recovers a panic into a 500, and
// logs the call (never the key or the body).
func (s *Server) serve(w http.ResponseWriter, r *http.Request, rt route) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	var p principal
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("handler panic", "route", rt.method+" "+rt.pattern, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if sw.status == 0 {
				writeProblem(sw, newProblem(http.StatusInternalServerError, problemBase+"internal", "Internal error", "the server failed; retry later"))
			}
		}
		level := slog.LevelInfo
		if rt.public {
			level = slog.LevelDebug
		}
		status := sw.status
		if status == 0 {
			status = http.StatusOK // nothing written: net/http answers 200
		}
		s.cfg.Metrics.Histogram("herald_http_request_duration_seconds", "API request latency by route pattern and status",
			metrics.LatencyBuckets, "route", rt.method+" "+rt.pattern, "status", strconv.Itoa(status)).ObserveSince(start)
		s.log.Log(r.Context(), level, "http", "method", r.Method, "route", rt.pattern, "status", sw.status,
			"tenant", p.tenant, "key", p.name, "elapsed", time.Since(start).Round(time.Microsecond))
	}()
	if !rt.public {
		var ok bool
		if p, ok = authenticate(s.cfg.Keys, r); !ok {
			writeProblem(sw, unauthorized())
			return
		}
	}
	rt.handle(s, sw, r, p)
}

// Start connects to Kafka and starts the producer and the read models. It
// returns once the clients exist and the live decisions consumer is
// positioned at the end of herald.decisions, so sends (idempotent replays
// and conflicts included) are answered correctly at once; the replica
// becomes ready (explain, devices) once it has caught up, and the read
// model (GET /v1/notifications/{id}) shows history once it has read it.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.closed {
		return errors.New("api: already started (a server starts once)")
	}
	base := append([]kgo.Opt{kgo.SeedBrokers(s.cfg.Brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted())}, s.cfg.ClientOpts...)
	// The read model's consumer: none when history comes from the audit
	// record (history.go). franz-go fetches as soon as a consuming client
	// exists, so it is not even made then.
	var trCl *kgo.Client
	if !s.tr.ownOnly {
		var err error
		trCl, err = kgo.NewClient(append(base,
			kgo.ConsumeTopics(s.requestsT, s.decisionsT, s.attemptsT, s.outcomesT, s.receiptsT),
			kgo.ConsumeStartOffset(kgo.NewOffset().AfterMilli(time.Now().Add(-s.cfg.Lookback).UnixMilli())),
			kgo.FetchMinBytes(batchedFetchBytes), kgo.FetchMaxWait(batchedFetchWait),
		)...)
		if err != nil {
			return fmt.Errorf("api: read model client: %w", err)
		}
	}
	closeTr := func() {
		if trCl != nil {
			trCl.Close()
		}
	}
	repCl, err := kgo.NewClient(append(base,
		kgo.ConsumeTopics(s.rep.topics()...),
		kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords(),
		kgo.FetchMinBytes(batchedFetchBytes), kgo.FetchMaxWait(batchedFetchWait),
	)...)
	if err != nil {
		closeTr()
		return fmt.Errorf("api: replica client: %w", err)
	}
	if err := repCl.Ping(ctx); err != nil {
		closeTr()
		repCl.Close()
		return fmt.Errorf("api: reach Kafka: %w", err)
	}
	liveCl, err := s.liveDecisionsClient(ctx, repCl, base)
	if err != nil {
		closeTr()
		repCl.Close()
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.clients = []*kgo.Client{repCl, liveCl}
	if trCl != nil {
		s.clients = append(s.clients, trCl)
	}
	s.started = true
	s.wg.Add(4)
	go func() { defer s.wg.Done(); s.w.run(runCtx) }()
	go func() {
		defer s.wg.Done()
		s.tr.consumeLive(runCtx, liveCl, s.repliesT, metrics.ConsumerLag(s.cfg.Metrics, "api-live-decisions"), s.log)
	}()
	go func() {
		defer s.wg.Done()
		if trCl == nil {
			return // history comes from the audit record (history.go)
		}
		if s.cfg.holdReadModel != nil {
			select {
			case <-s.cfg.holdReadModel:
			case <-runCtx.Done():
				return
			}
		}
		s.tr.consume(runCtx, trCl, trackerTopics{s.requestsT, s.decisionsT, s.attemptsT, s.outcomesT, s.receiptsT},
			metrics.ConsumerLag(s.cfg.Metrics, "api-read-model"), s.log)
	}()
	go func() {
		defer s.wg.Done()
		if err := s.rep.consume(runCtx, repCl, metrics.ConsumerLag(s.cfg.Metrics, "api-replica"), s.log); err != nil {
			s.log.Error("replica stopped", "err", err)
		}
	}()
	s.log.Info("api started", "instance", s.cfg.InstanceID, "requests", s.requestsT)
	return nil
}

// The read model's and the replica's consumers are eventually consistent
// by design, so each fetch of theirs waits at the broker for
// batchedFetchBytes of records or batchedFetchWait, whichever comes first,
// rather than returning with the first record (franz-go's default: one
// byte). Under load that makes a few fetches a second of each instead of
// one per round trip, which the broker spends CPU on per request; idle,
// they lag by up to batchedFetchWait. The live decisions consumer, which
// answers waiting sends, keeps the default.
const (
	batchedFetchBytes = 64 << 10
	batchedFetchWait  = 50 * time.Millisecond
)

// liveDecisionsClient lists the end offsets of this instance's partition
// of herald.replies (reply.For its instance id) and returns a
// read_committed consumer of that partition from there (see
// tracker.consumeLive); with a quota, also of every partition of
// herald.decisions from their ends, whose accepted decisions it counts.
// Listed before Start returns, so before any send: every reply to a
// record this server writes is committed after the listing, at or above
// that offset, and reaches its waiter.
func (s *Server) liveDecisionsClient(ctx context.Context, cl *kgo.Client, base []kgo.Opt) (*kgo.Client, error) {
	adm := kadm.NewClient(cl)
	listed := []string{s.repliesT}
	if s.cfg.QuotaPerWindow > 0 {
		listed = append(listed, s.decisionsT)
	}
	ends, err := s.listEndOffsets(ctx, adm, listed...)
	if err != nil {
		return nil, fmt.Errorf("api: list end offsets of %s: %w (run herald topics create)", strings.Join(listed, ", "), err)
	}
	replies := ends[s.repliesT]
	if len(replies) == 0 {
		return nil, fmt.Errorf("api: topic %s has no partitions (run herald topics create)", s.repliesT)
	}
	s.replyPartition = reply.For(s.cfg.InstanceID, len(replies))
	from := map[string]map[int32]kgo.Offset{s.repliesT: {s.replyPartition: kgo.NewOffset().At(replies[s.replyPartition].Offset)}}
	s.tr.liveFrom = map[int32]int64{}
	if s.cfg.QuotaPerWindow > 0 {
		from[s.decisionsT] = map[int32]kgo.Offset{}
		for p, o := range ends[s.decisionsT] {
			from[s.decisionsT][p] = kgo.NewOffset().At(o.Offset)
			s.tr.liveFrom[p] = o.Offset
		}
	}
	liveCl, err := kgo.NewClient(append(base, kgo.ConsumePartitions(from))...)
	if err != nil {
		return nil, fmt.Errorf("api: live decisions client: %w", err)
	}
	return liveCl, nil
}

// newProducer makes the transactional producer: acks=all and idempotent
// (franz-go's defaults, required by transactions), placed by the catalog's
// partitioner.
func (s *Server) newProducer() (*kgo.Client, error) {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.TransactionalID("herald-api-" + s.cfg.InstanceID),
		kgo.TransactionTimeout(s.cfg.TransactionTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(s.cfg.Catalog.Partitioner()),
		kgo.ProducerLinger(0),
	}, s.cfg.ClientOpts...)
	return kgo.NewClient(opts...)
}

// newPlainProducer makes the producer of single records: idempotent,
// acks=all, no transaction (see writer), lingering Config.ProducerLinger.
func (s *Server) newPlainProducer() (*kgo.Client, error) {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(s.cfg.Catalog.Partitioner()),
		kgo.ProducerLinger(max(s.cfg.ProducerLinger, 0)),
	}, s.cfg.ClientOpts...)
	return kgo.NewClient(opts...)
}

// Close stops the producer (after the transaction in flight) and the
// consumers. Requests still waiting answer with what they have.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return nil
	}
	s.cancel()
	for _, cl := range s.clients {
		cl.Close()
	}
	s.wg.Wait()
	s.started, s.closed = false, true
	return nil
}

func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// Ready reports whether the server is started, its device, preference
// and segment replica has caught up, and a Kafka broker answers: whether
// every route answers now. While the brokers are down sends answer 503
// and the SDK retries them.
func (s *Server) Ready() bool { return s.running() && s.rep.ready.Load() && s.kafka.Ready() }

// replicaClient is the replica's consumer, through which Ready asks a
// broker; nil unless started.
func (s *Server) replicaClient() *kgo.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return nil
	}
	return s.clients[0]
}

func (s *Server) getHealth(w http.ResponseWriter, r *http.Request, _ principal) {
	status := "ok"
	if !s.running() {
		status = "stopped"
	} else if !s.rep.ready.Load() {
		status = "starting"
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": status})
}
