package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/catchup"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/schemas"
)

// Table is the in-memory copy of herald.webhooks (every tenant's
// endpoints), read read_committed from the topic's start by Run. The
// fan-out and the adapter of one process share it. It is ready once it
// has read every partition up to its last stable offset as of Run's
// start; it then lags the topic by the time a committed change takes to
// be read.
type Table struct {
	// Lag, when not nil, reports how far Run's consumer is behind the
	// topic (herald_consumer_lag_records{consumer="webhook-table"} from
	// NewChannel).
	Lag *metrics.Lag

	topic string
	ready chan struct{}
	once  sync.Once

	mu sync.RWMutex
	// byTenant: tenant → endpoint id → endpoint.
	byTenant map[string]map[string]schemas.Webhook
}

// NewTable returns an empty table of the topic.
func NewTable(topic string) *Table {
	return &Table{topic: topic, ready: make(chan struct{}), byTenant: map[string]map[string]schemas.Webhook{}}
}

// Put applies one endpoint (a test's, or the API's own write).
func (t *Table) Put(w schemas.Webhook) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byTenant[w.Tenant] == nil {
		t.byTenant[w.Tenant] = map[string]schemas.Webhook{}
	}
	t.byTenant[w.Tenant][w.ID] = w
}

// Delete removes one endpoint.
func (t *Table) Delete(tenant, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byTenant[tenant], id)
	if len(t.byTenant[tenant]) == 0 {
		delete(t.byTenant, tenant)
	}
}

// Endpoint returns one endpoint.
func (t *Table) Endpoint(tenant, id string) (schemas.Webhook, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	w, ok := t.byTenant[tenant][id]
	return w, ok
}

// Tenant returns a tenant's endpoints, sorted by id.
func (t *Table) Tenant(tenant string) []schemas.Webhook {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]schemas.Webhook, 0, len(t.byTenant[tenant]))
	for _, w := range t.byTenant[tenant] {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Subscribed reports whether a tenant has an enabled endpoint subscribed
// to an event.
func (t *Table) Subscribed(tenant, event string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, w := range t.byTenant[tenant] {
		if w.Enabled && slices.Contains(w.Events, event) {
			return true
		}
	}
	return false
}

// Secrets returns every endpoint's secret (the local receiver emulator of
// herald dev verifies with them; never served).
func (t *Table) Secrets() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []string
	for _, ws := range t.byTenant {
		for _, w := range ws {
			out = append(out, w.Secret)
		}
	}
	return out
}

// Ready is closed once the table has caught up with the topic as of Run's
// start.
func (t *Table) Ready() <-chan struct{} { return t.ready }

// WaitReady waits until the table is ready or ctx ends.
func (t *Table) WaitReady(ctx context.Context) error {
	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("webhook: endpoints not loaded: %w", ctx.Err())
	}
}

func (t *Table) markReady() { t.once.Do(func() { close(t.ready) }) }

// apply applies one record of the topic (nil value: a deletion).
func (t *Table) apply(rec *kgo.Record, log *slog.Logger) {
	if rec.Value == nil {
		tenant, id, ok := splitKey(string(rec.Key))
		if ok {
			t.Delete(tenant, id)
		}
		return
	}
	var w schemas.Webhook
	if err := schemas.Decode(rec.Value, &w); err != nil {
		log.Warn("webhook table: skip an undecodable endpoint", "offset", rec.Offset, "err", err)
		return
	}
	t.Put(w)
}

// Key is the compacted key of an endpoint: RecipientKey(tenant, id).
func Key(tenant, id string) string { return schemas.RecipientKey(tenant, id) }

func splitKey(key string) (tenant, id string, ok bool) {
	a, b, found := strings.Cut(key, "/")
	if !found {
		return "", "", false
	}
	tenant, err1 := url.PathUnescape(a)
	id, err2 := url.PathUnescape(b)
	return tenant, id, found && err1 == nil && err2 == nil
}

// Run reads the topic until ctx ends with a client of its own (kgo
// options: brokers, isolation, kfake workarounds). It returns an error
// only when it cannot start.
func (t *Table) Run(ctx context.Context, opts []kgo.Opt, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics(t.topic),
		kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()),
		// Commit markers count towards the last stable offset: without
		// them a partition whose last record is a marker never catches up.
		kgo.KeepControlRecords(),
	}, opts...)...)
	if err != nil {
		return fmt.Errorf("webhook: table client: %w", err)
	}
	defer cl.Close()
	err = catchup.Follow(ctx, cl, []string{t.topic}, log.With("component", "webhook-table"), t.Lag, func(rec *kgo.Record) { t.apply(rec, log) }, t.markReady)
	if err != nil {
		return fmt.Errorf("webhook: table: %w", err)
	}
	return nil
}
