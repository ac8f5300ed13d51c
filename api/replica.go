package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/catchup"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
)

// replica is the API's read-only copy of compacted topics, consumed
// read_committed from their start: devices, preferences and segments (for
// their endpoints and for resolving a device target's user; tag, segment
// and all targets are resolved by the route stage),
// the feed, the webhook endpoints and, only with
// a quota, the dedupe stage's seen-set (herald.seen; seenT empty without
// one: explain asks the dedupe stage itself, see explainByStage). It is
// eventually consistent with the stage that owns each topic: it lags by the
// time the consumer takes to read a committed change. The API's own device,
// preference and segment writes are applied to it as soon as they commit,
// so a caller reads its own writes on the instance that made them.
type replica struct {
	seenT, devicesT, prefsT, segmentsT string
	ready                              atomic.Bool // caught up with the topics' ends as of Start

	dec schemas.Decoder // apply's, from the one goroutine that consumes

	// seen is herald.seen's copy, packed as the stage keeps it, read only
	// with a quota (checkQuota): then every instance holds the whole
	// seen-set.
	seen *dedupe.SeenSet

	mu      sync.RWMutex
	devices map[string]map[string]schemas.Device // RecipientKey → device id → device
	prefs   map[string]schemas.Preferences       // RecipientKey → preferences
	segs    map[string]schemas.Segment           // RecipientKey(tenant, name) → segment
	// feedT is herald.feed (empty: no feed); feed holds its items,
	// RecipientKey → notification id → item.
	feedT string
	feed  map[string]map[string]schemas.FeedItem
	// webhooksT is herald.webhooks (empty: not read); webhooks holds the
	// endpoints, webhook.Key(tenant, id) → endpoint.
	webhooksT string
	webhooks  map[string]schemas.Webhook
}

func newReplica(seen, devices, prefs, segments string) *replica {
	return &replica{seenT: seen, devicesT: devices, prefsT: prefs, segmentsT: segments,
		seen: dedupe.NewSeenSet(), devices: map[string]map[string]schemas.Device{}, prefs: map[string]schemas.Preferences{},
		segs: map[string]schemas.Segment{},
		feed: map[string]map[string]schemas.FeedItem{}, webhooks: map[string]schemas.Webhook{}}
}

func (r *replica) device(tenant, user, id string) (schemas.Device, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.devices[schemas.RecipientKey(tenant, user)][id]
	return d, ok
}

// deviceOwners returns, sorted, the users of a tenant who have a device
// with this id (device targets): device ids are unique per user, not per
// tenant, so a device target names its user when more than one has it.
func (r *replica) deviceOwners(tenant, id string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	prefix := url.PathEscape(tenant) + "/"
	var users []string
	for k, ds := range r.devices {
		if d, ok := ds[id]; ok && strings.HasPrefix(k, prefix) {
			users = append(users, d.Recipient)
		}
	}
	sort.Strings(users)
	return users
}

func (r *replica) userDevices(tenant, user string) []schemas.Device {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []schemas.Device
	for _, d := range r.devices[schemas.RecipientKey(tenant, user)] {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DeviceID < out[j].DeviceID })
	return out
}

func (r *replica) segment(tenant, name string) (schemas.Segment, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.segs[schemas.RecipientKey(tenant, name)]
	return s, ok
}

// putKey applies one change to m, a map of the replica, under its lock: v
// under key, or key deleted when v is nil.
func putKey[T any](r *replica, m map[string]T, key string, v *T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v == nil {
		delete(m, key)
		return
	}
	m[key] = *v
}

func (r *replica) putSegment(key string, s *schemas.Segment) { putKey(r, r.segs, key, s) }

func (r *replica) preferences(tenant, user string) (schemas.Preferences, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.prefs[schemas.RecipientKey(tenant, user)]
	return p, ok
}

// putDevice and the others apply one change (nil: delete).
func (r *replica) putDevice(key string, d *schemas.Device) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rk := schemas.RecipientPrefix(key)
	if d == nil {
		id, err := url.PathUnescape(key[min(len(rk)+1, len(key)):])
		if err != nil {
			return
		}
		delete(r.devices[rk], id)
		if len(r.devices[rk]) == 0 {
			delete(r.devices, rk)
		}
		return
	}
	if r.devices[rk] == nil {
		r.devices[rk] = map[string]schemas.Device{}
	}
	r.devices[rk][d.DeviceID] = *d
}

func (r *replica) putWebhook(key string, wh *schemas.Webhook) { putKey(r, r.webhooks, key, wh) }

func (r *replica) webhook(tenant, id string) (schemas.Webhook, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	wh, ok := r.webhooks[schemas.RecipientKey(tenant, id)]
	return wh, ok
}

// tenantWebhooks returns a tenant's endpoints sorted by id.
func (r *replica) tenantWebhooks(tenant string) []schemas.Webhook {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []schemas.Webhook
	for _, wh := range r.webhooks {
		if wh.Tenant == tenant {
			out = append(out, wh)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (r *replica) putPreferences(key string, p *schemas.Preferences) { putKey(r, r.prefs, key, p) }

// applyRecord applies one record of a compacted topic with put: a
// tombstone deletes its key, a value replaces it. A value that does not
// decode changes nothing; its error is returned.
func applyRecord[T any, P interface {
	*T
	schemas.Record
}](dec *schemas.Decoder, rec *kgo.Record, put func(key string, v *T)) error {
	if rec.Value == nil {
		put(string(rec.Key), nil)
		return nil
	}
	v := new(T)
	if err := dec.Decode(rec.Value, P(v)); err != nil {
		return err
	}
	put(string(rec.Key), v)
	return nil
}

func (r *replica) apply(rec *kgo.Record, log *slog.Logger) {
	var what string
	var err error
	switch rec.Topic {
	case r.seenT:
		what, err = "seen entry", r.seen.Apply(rec)
	case r.devicesT:
		what, err = "device", applyRecord(&r.dec, rec, r.putDevice)
	case r.prefsT:
		what, err = "preferences", applyRecord(&r.dec, rec, r.putPreferences)
	case r.segmentsT:
		what, err = "segment", applyRecord(&r.dec, rec, r.putSegment)
	case r.webhooksT:
		what, err = "webhook", applyRecord(&r.dec, rec, r.putWebhook)
	case r.feedT:
		what, err = "feed item", applyRecord(&r.dec, rec, r.putFeed)
	}
	if err != nil {
		log.Debug("replica: skip undecodable "+what, "err", err)
	}
}

// topics lists the topics the replica reads.
func (r *replica) topics() []string {
	ts := []string{r.devicesT, r.prefsT, r.segmentsT}
	if r.seenT != "" {
		ts = append(ts, r.seenT)
	}
	if r.feedT != "" {
		ts = append(ts, r.feedT)
	}
	if r.webhooksT != "" {
		ts = append(ts, r.webhooksT)
	}
	return ts
}

// consume reads the replica's topics until ctx ends. It marks the replica
// ready once it has read every partition up to its last stable offset as
// of the start: before that, explain and device lookups would answer from
// a partial copy.
func (r *replica) consume(ctx context.Context, cl *kgo.Client, lag *metrics.Lag, log *slog.Logger) error {
	err := catchup.Follow(ctx, cl, r.topics(), log.With("component", "replica"), lag, func(rec *kgo.Record) { r.apply(rec, log) }, func() {
		r.ready.Store(true)
		log.Info("replica caught up")
	})
	if err != nil {
		return fmt.Errorf("api: replica: %w", err)
	}
	return nil
}
