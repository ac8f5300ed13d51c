package webhook_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/webhook"
	"github.com/heraldhq/herald/topics"
)

// Fast tests of the parts that read and write Kafka (the endpoints table,
// the fan-out, the decisions forwarder, the completion stage and the
// channel that runs them with the sink) on kfake; the real broker's runs
// are in kafka_test.go, completion_kafka_test.go and crash_test.go.

// kfakeCluster starts a one-broker kfake cluster for the test and returns
// its addresses and the options its clients need.
func kfakeCluster(t *testing.T) ([]string, []kgo.Opt) {
	t.Helper()
	c := testenv.Kfake(t)
	return c.ListenAddrs(), append(embedded.ClientOpts(), kgo.FetchMaxWait(100*time.Millisecond))
}

// record is v encoded as a record of topic under key, with its schema
// header unless header is false.
func record(t *testing.T, topic, key string, v schemas.Record, header bool) *kgo.Record {
	t.Helper()
	b, err := schemas.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Topic: topic, Key: []byte(key), Value: b}
	if header {
		r.Headers = []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(v.SchemaName())}}
	}
	return r
}

// produceRecords writes records in order with the catalog's partitioner
// (a record with a Partition set keeps it when cat is nil).
func produceRecords(t *testing.T, brokers []string, cat *topics.Catalog, recs ...*kgo.Record) {
	t.Helper()
	p := kgo.ManualPartitioner()
	if cat != nil {
		p = cat.Partitioner()
	}
	cl := testenv.Client(t, brokers, append(embedded.ClientOpts(), kgo.RecordPartitioner(p))...)
	for _, r := range recs {
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// waitReady waits until ready reports true, calling alive (when not nil)
// at each look so that a run that ended fails the test at once; the
// deadline (testenv.Guard) turns a hang into a failure, it asserts no
// speed.
func waitReady(t *testing.T, what string, alive func(), ready func() bool) {
	t.Helper()
	for deadline := time.Now().Add(testenv.Guard()); !ready(); time.Sleep(20 * time.Millisecond) {
		if alive != nil {
			alive()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became ready", what)
		}
	}
}

// awaitCommittedThrough waits until group has committed, on every
// partition of topic, an offset past the partition's last committed
// record: every record the stage will ever read there is processed, and
// its outputs committed with it.
func awaitCommittedThrough(t *testing.T, alive func(), brokers []string, opts []kgo.Opt, group, topic string) {
	t.Helper()
	want := map[int32]int64{}
	for _, r := range testenv.ReadCommitted(t, brokers, topic, opts...) {
		want[r.Partition] = max(want[r.Partition], r.Offset+1)
	}
	adm := kadm.NewClient(testenv.Client(t, brokers))
	waitReady(t, group+" through "+topic, alive, func() bool {
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return false
		}
		for p, end := range want {
			if o, ok := offs.Lookup(topic, p); !ok || o.At < end {
				return false
			}
		}
		return true
	})
}

// awaitOutcomes waits until each delivery has an outcome on topic (which
// also holds records that do not decode, skipped) and returns them.
func awaitOutcomes(t *testing.T, alive func(), brokers []string, opts []kgo.Opt, topic string, ids []string) map[string][]schemas.Outcome {
	t.Helper()
	var got map[string][]schemas.Outcome
	waitReady(t, "the outcomes", alive, func() bool {
		got = map[string][]schemas.Outcome{}
		for _, r := range testenv.ReadCommitted(t, brokers, topic, opts...) {
			var o schemas.Outcome
			if schemas.Decode(r.Value, &o) == nil {
				got[o.DeliveryID] = append(got[o.DeliveryID], o)
			}
		}
		return !slices.ContainsFunc(ids, func(id string) bool { return len(got[id]) == 0 })
	})
	return got
}

// TestTheEndpointsTableReadsHeraldWebhooksUntilItCatchesUp: the table
// applies every endpoint of the topic, a tombstone deletes one (and only
// that one: its tenant's other endpoints stay), keys are unescaped, a
// record that does not decode and a tombstone whose key is not a tenant
// and an id change nothing; it becomes ready once it has read the topic,
// and Run returns nil when its context ends.
func TestTheEndpointsTableReadsHeraldWebhooksUntilItCatchesUp(t *testing.T) {
	brokers, opts := kfakeCluster(t)
	topic := testenv.Topic(t, brokers, 2, nil)
	a, b := endpoint("a", "https://x/a", schemas.EventDeliveryFailed), endpoint("b", "https://x/b", schemas.EventDeliveryFailed)
	odd := endpoint("x/y z", "https://x/odd", schemas.EventDeliveryFailed)
	odd.Tenant = "t/1"
	tomb := func(key string, p int32) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte(key), Partition: p}
	}
	recs := []*kgo.Record{
		record(t, topic, webhook.Key(a.Tenant, a.ID), &a, true), record(t, topic, webhook.Key(b.Tenant, b.ID), &b, true),
		record(t, topic, webhook.Key(odd.Tenant, odd.ID), &odd, true),
		{Topic: topic, Key: []byte("acme/c"), Value: []byte("{not json")},
		tomb(webhook.Key(b.Tenant, b.ID), 0), tomb("acme/%zz", 0), tomb("no-slash", 0),
	}
	for _, r := range recs {
		r.Partition = 0 // one partition: the tombstone follows the endpoint
	}
	recs = append(recs, record(t, topic, "other", &a, true)) // partition 1 holds a record too
	recs[len(recs)-1].Partition = 1
	produceRecords(t, brokers, nil, recs...)

	tbl := webhook.NewTable(topic)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tbl.Run(ctx, append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...), nil) }()
	if err := tbl.WaitReady(testenv.Guarded(t)); err != nil {
		cancel()
		t.Fatalf("the table never caught up: %v (run: %v)", err, testenv.Await(t, done, "the table's Run"))
	}
	t.Run("the tombstoned endpoint is gone and its tenant's other endpoint stays", func(t *testing.T) {
		if got := tbl.Tenant("acme"); len(got) != 1 || got[0].ID != "a" {
			t.Fatalf("acme's endpoints %+v, want a only", got)
		}
		if _, ok := tbl.Endpoint("acme", "b"); ok {
			t.Fatal("b is still there")
		}
	})
	t.Run("an endpoint whose tenant and id need escaping is found by them", func(t *testing.T) {
		if w, ok := tbl.Endpoint("t/1", "x/y z"); !ok || w.URL != odd.URL {
			t.Fatalf("endpoint %+v %v, want the odd one", w, ok)
		}
	})
	cancel()
	if err := testenv.Await(t, done, "the table's Run"); err != nil {
		t.Fatalf("Run returned %v when its context ended, want nil", err)
	}
}

func TestTheEndpointsTableKeepsEachTenantsEndpointsApart(t *testing.T) {
	tbl := webhook.NewTable("herald.webhooks")
	for _, id := range []string{"c", "a", "b"} {
		tbl.Put(endpoint(id, "https://x/"+id, schemas.EventSendCompleted))
	}
	off := endpoint("off", "https://x/off", schemas.EventDeliveryFailed)
	off.Enabled = false
	off.Tenant = "globex"
	tbl.Put(off)
	t.Run("a tenant's endpoints are listed by id", func(t *testing.T) {
		var ids []string
		for _, w := range tbl.Tenant("acme") {
			ids = append(ids, w.ID)
		}
		if !slices.Equal(ids, []string{"a", "b", "c"}) {
			t.Fatalf("ids %v, want a b c", ids)
		}
	})
	t.Run("deleting one endpoint leaves the others", func(t *testing.T) {
		tbl.Delete("acme", "b")
		if got := tbl.Tenant("acme"); len(got) != 2 || got[0].ID != "a" || got[1].ID != "c" {
			t.Fatalf("endpoints %+v, want a and c", got)
		}
	})
	t.Run("a tenant is subscribed to an event through an enabled endpoint only", func(t *testing.T) {
		if !tbl.Subscribed("acme", schemas.EventSendCompleted) || tbl.Subscribed("acme", schemas.EventDeliveryFailed) ||
			tbl.Subscribed("globex", schemas.EventDeliveryFailed) || tbl.Subscribed("initech", schemas.EventSendCompleted) {
			t.Fatal("Subscribed answers other than the endpoints say")
		}
	})
	t.Run("every endpoint's secret is listed for the local receiver", func(t *testing.T) {
		if got := tbl.Secrets(); len(got) != 3 {
			t.Fatalf("%d secrets, want 3", len(got))
		}
	})
	t.Run("deleting a tenant's last endpoint leaves it none", func(t *testing.T) {
		tbl.Delete("globex", "off")
		if got := tbl.Tenant("globex"); len(got) != 0 {
			t.Fatalf("endpoints %+v", got)
		}
	})
}

// logRecorder is a slog handler keeping each record's message and
// attributes ("key=value").
type logRecorder struct {
	mu    *sync.Mutex
	lines *[]string
	attrs []string
}

func newLogRecorder() *logRecorder { return &logRecorder{mu: &sync.Mutex{}, lines: new([]string)} }

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *l
	c.attrs = slices.Clone(l.attrs)
	for _, a := range as {
		c.attrs = append(c.attrs, a.String())
	}
	return &c
}
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	line := append([]string{r.Message}, l.attrs...)
	r.Attrs(func(a slog.Attr) bool { line = append(line, a.String()); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.lines = append(*l.lines, strings.Join(line, " "))
	return nil
}

// has reports whether a line holds every part.
func (l *logRecorder) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range *l.lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// producedHook records the topic and key of every record its clients
// produce.
type producedHook struct {
	mu   sync.Mutex
	seen []string
}

func (h *producedHook) OnProduceRecordBuffered(r *kgo.Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, r.Topic+" "+string(r.Key))
}

func (h *producedHook) saw(topic, key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.seen, topic+" "+key)
}

// TestTheWebhookChannelOnKfakeSendsEachEventOnce: the channel as `herald
// sink --channel webhook` runs it (table, fan-out, decisions forwarder,
// completion stage and sink), its fan-out configured from the sink's
// settings alone. A failed delivery of acme raises delivery.completed,
// delivery.failed and, with its route decision, send.completed, each
// once, signed, at acme's endpoint; an endpoint deleted before, another
// tenant's outcome, a webhook delivery's own outcome, records that do not
// decode and a decision of another schema raise nothing; only acme's
// records reach herald.completions.
func TestTheWebhookChannelOnKfakeSendsEachEventOnce(t *testing.T) {
	brokers, opts := kfakeCluster(t)
	cat := testenv.Catalog(t, brokers, 2)
	em := startReceiver(t)
	all := endpoint("all", em.EndpointURL("all"), schemas.WebhookEvents...)
	em.AddSecret(all.Secret)
	gone := endpoint("gone", em.EndpointURL("gone"), all.Events...)
	whTopic, outTopic, decTopic := cat.Name(topics.Webhooks), cat.Name(topics.Outcomes), cat.Name(topics.Decisions)
	failed := outcome()
	globex := outcome()
	globex.Tenant, globex.NotificationID = "globex", "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
	decision := routeDecision(schemas.DecisionRouted, "fcm/d1")
	otherSchema := routeDecision(schemas.DecisionRateLimited)
	otherSchema.NotificationID = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	otherRec := record(t, decTopic, otherSchema.NotificationID, otherSchema, false)
	otherRec.Headers = []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte("somethingelse.v1")}}
	// An open notification's state, committed before the channel starts:
	// the completion stage must take the sink's explicit reset choice, or
	// it refuses to start a partition whose changelog holds state but
	// whose group has no offset.
	open, _ := webhook.ApplyDecision(nil, routeDecision(schemas.DecisionRouted, "apns/phone"), time.Now().UnixMilli())
	open.NotificationID = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	produceRecords(t, brokers, cat,
		record(t, cat.Name(topics.CompletionState), open.NotificationID, open, true),
		&kgo.Record{Topic: cat.Name(topics.Completions), Key: []byte("garbage"), Value: []byte("{}")},
		record(t, whTopic, webhook.Key(all.Tenant, all.ID), &all, true),
		record(t, whTopic, webhook.Key(gone.Tenant, gone.ID), &gone, true),
		&kgo.Record{Topic: whTopic, Key: []byte(webhook.Key(gone.Tenant, gone.ID))},
		record(t, outTopic, failed.DeliveryID, failed, true),
		record(t, outTopic, globex.DeliveryID, globex, true),
		&kgo.Record{Topic: outTopic, Key: []byte("garbage"), Value: []byte("{not json")},
		record(t, decTopic, nid, decision, false), // a decision without a schema header is read as one
		otherRec,
		&kgo.Record{Topic: decTopic, Key: []byte("garbage"), Value: []byte("{not json"),
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.DecisionV1)}}},
	)

	logs := newLogRecorder()
	reg := metrics.NewRegistry()
	produced := &producedHook{}
	opts = append(opts, kgo.WithHooks(produced))
	r, err := webhook.NewChannel(webhook.ChannelOptions{Sink: sinks.Options{
		Instance: stage.Instance{Brokers: brokers, InstanceID: "w" + embedded.TransactionalSuffix(), ResetOffsets: embedded.ResetOffsets,
			BatchInterval: 10 * time.Millisecond, ClientOpts: opts, Logger: slog.New(logs), Metrics: reg},
		Catalog: cat, CallTimeout: 5 * time.Second,
	}, AllowPrivate: true}) // the receiver listens on loopback
	if err != nil {
		t.Fatal(err)
	}
	if r.Ready() {
		t.Fatal("ready before it ran")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, brokers, opts, nil) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := testenv.Await(t, done, "the channel's Run"); err != nil {
				t.Errorf("Run returned %v when its context ended, want nil", err)
			}
		}
	}
	t.Cleanup(stop)
	alive := func() {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("the channel stopped: %v", err)
		default:
		}
	}
	waitReady(t, "the channel", alive, r.Ready)

	var e *schemas.Completion
	e, _ = webhook.ApplyDecision(e, decision, 0)
	e, _ = webhook.ApplyOutcome(e, failed, 0)
	want := append(webhook.Commands(failed, []schemas.Webhook{all}), webhook.CompletionCommands(e, []schemas.Webhook{all})...)
	if len(want) != 3 {
		t.Fatalf("%d commands expected, want 3", len(want))
	}
	ids := make([]string, len(want))
	for i, c := range want {
		ids[i] = c.DeliveryID
	}
	outcomes := awaitOutcomes(t, alive, brokers, opts, outTopic, ids)
	awaitCommittedThrough(t, alive, brokers, opts, "herald-webhook-fanout", outTopic)
	awaitCommittedThrough(t, alive, brokers, opts, "herald-webhook-decisions", decTopic)
	awaitCommittedThrough(t, alive, brokers, opts, "herald-webhook-completion", cat.Name(topics.Completions))

	t.Run("herald.deliveries.webhook holds each event's command once, byte for byte", func(t *testing.T) {
		got := testenv.ReadCommitted(t, brokers, cat.Name(topics.Deliveries(webhook.Channel)), opts...)
		if len(got) != len(want) {
			t.Fatalf("%d commands, want %d", len(got), len(want))
		}
		for _, w := range want {
			i := slices.IndexFunc(got, func(r *kgo.Record) bool { return string(r.Key) == w.DeliveryID })
			if i < 0 {
				t.Fatalf("no command %s (%s)", w.DeliveryID, w.Title)
			}
			var c schemas.DeliveryCommand
			if err := schemas.Decode(got[i].Value, &c); err != nil || string(c.Payload) != string(w.Payload) || c.CollapseID != w.CollapseID {
				t.Fatalf("command %+v (%v), want %+v", c, err, w)
			}
		}
	})
	t.Run("each event reached the endpoint once and verified", func(t *testing.T) {
		for _, m := range em.Received() {
			if !m.Verified || m.Endpoint != "all" {
				t.Errorf("%s at %s: verified %v %s", m.ID, m.Endpoint, m.Verified, m.VerifyError)
			}
		}
		if em.Total() != 3 {
			t.Errorf("the receiver read %d messages, want 3", em.Total())
		}
		for _, id := range ids {
			if o := outcomes[id]; len(o) != 1 || o[0].Status != schemas.OutcomeDelivered {
				t.Errorf("outcomes of %s: %+v, want one delivered", id, o)
			}
		}
	})
	t.Run("herald.completions holds acme's decision and outcome only (beside the test's record), keyed by the notification", func(t *testing.T) {
		var got []string
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Completions), opts...) {
			var schema string
			for _, h := range r.Headers {
				if h.Key == schemas.HeaderSchema {
					schema = string(h.Value)
				}
			}
			got = append(got, string(r.Key)+" "+schema)
		}
		slices.Sort(got)
		if w := []string{nid + " " + schemas.DecisionV1, nid + " " + schemas.OutcomeV1, "garbage "}; !slices.Equal(got, w) {
			t.Fatalf("records %v, want %v", got, w)
		}
	})
	t.Run("the completed notification's state is tombstoned", func(t *testing.T) {
		var last []byte
		n := 0
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.CompletionState), opts...) {
			if string(r.Key) == nid {
				last, n = r.Value, n+1
			}
		}
		if n == 0 || last != nil {
			t.Fatalf("%d records of the notification, the last %q: want a tombstone last", n, last)
		}
	})
	t.Run("the stages count their records in the sink's metrics, the table reports its lag there, and they log through the sink's logger", func(t *testing.T) {
		fams, err := reg.Gatherer().Gather()
		if err != nil {
			t.Fatal(err)
		}
		counted := map[string]float64{}
		for _, f := range fams {
			if f.GetName() != "herald_stage_records_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "stage" {
						counted[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
		for _, s := range []string{"webhook-fanout", "webhook-decisions", "webhook-completion"} {
			if counted[s] == 0 {
				t.Errorf("stage %s counted no record (counts %v)", s, counted)
			}
		}
		// The endpoints table's consumer reports its lag beside the stages'.
		tableLag := false
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					tableLag = tableLag || f.GetName() == "herald_consumer_lag_records" && l.GetName() == "consumer" && l.GetValue() == "webhook-table"
				}
			}
		}
		if !tableLag {
			t.Error("no herald_consumer_lag_records of the endpoints table (consumer webhook-table)")
		}
		if !logs.has("skip an undecodable outcome", "stage=webhook-fanout") || !logs.has("skip an undecodable decision", "stage=webhook-decisions") ||
			!logs.has("skip a record of another schema", "stage=webhook-completion") {
			t.Error("the stages' warnings did not go to the sink's logger")
		}
	})
	t.Run("the stages' clients take the sink's client options", func(t *testing.T) {
		for _, w := range want {
			if !produced.saw(cat.Name(topics.Deliveries(webhook.Channel)), w.DeliveryID) {
				t.Errorf("the hook saw no %s command", w.Title)
			}
		}
		if !produced.saw(cat.Name(topics.Completions), nid) {
			t.Error("the hook saw nothing forwarded to herald.completions")
		}
	})
	stop()
}

// TestTheWebhookChannelEndsWithItsTablesError: Run returns the error of
// an endpoints table that cannot start, and nil when it is shut down
// before the table has loaded.
func TestTheWebhookChannelEndsWithItsTablesError(t *testing.T) {
	cat := topics.New(topics.Options{})
	newChannel := func() *webhook.Runners {
		r, err := webhook.NewChannel(webhook.ChannelOptions{Sink: sinks.Options{
			Instance: stage.Instance{Brokers: []string{"127.0.0.1:1"}, InstanceID: "w1"}, Catalog: cat}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	t.Run("a table that cannot start ends Run with its error", func(t *testing.T) {
		err := newChannel().Run(testenv.Guarded(t), []string{"127.0.0.1:not-a-port"}, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "endpoints table") {
			t.Fatalf("Run = %v, want the table's error", err)
		}
	})
	t.Run("a channel shut down while its table loads returns nil", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := newChannel().Run(ctx, []string{"127.0.0.1:1"}, nil, nil); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	})
	t.Run("a channel needs its sink's catalog", func(t *testing.T) {
		if _, err := webhook.NewChannel(webhook.ChannelOptions{}); err == nil {
			t.Fatal("built without a catalog")
		}
	})
}
