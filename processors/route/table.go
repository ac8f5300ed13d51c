package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
)

// Directory is what a task reads about recipients: their devices and
// preferences, fresh as of Sync.
type Directory interface {
	// Recipient returns what is known of one recipient.
	Recipient(tenant, recipient string) Recipient
	// Sync returns once every device and preference change written to
	// input partition p's co-partitions before the call is applied.
	Sync(ctx context.Context, p int32) error
}

// Table is a Directory over the compacted topics herald.devices and
// herald.preferences, consumed from their start by one client per stage
// instance (every partition: the table holds every recipient, so a
// rebalance never waits for a restore of it).
//
// Freshness. Sync lists the end offsets of one partition of both topics and
// waits until the table has read that far, so a device or preference change
// acknowledged before the route stage processes a notification is seen by
// it (read your writes, across instances). A change written concurrently
// with a notification may or may not be.
type Table struct {
	devicesT, prefsT string
	// segmentsT is herald.segments (empty: not read, no segment is
	// known); segs its segments, RecipientKey(tenant, name) → segment.
	segmentsT string
	segs      map[string]schemas.Segment
	cl        *kgo.Client
	adm       *kadm.Client
	log       *slog.Logger

	mu      sync.Mutex
	changed *sync.Cond
	devices map[string]map[string]schemas.Device // RecipientKey → device id → device
	prefs   map[string]schemas.Preferences       // RecipientKey → preferences
	next    map[string]map[int32]int64           // topic → partition → next offset read
	err     error
}

// NewTable builds a table reading the two topics with a client of opts
// (seed brokers and any workarounds); Run reads them.
func NewTable(devices, prefs string, log *slog.Logger, opts ...kgo.Opt) (*Table, error) {
	return NewGroupTable(devices, prefs, "", log, opts...)
}

// NewGroupTable is NewTable that also reads herald.segments (segments, when
// not empty), so that it resolves group targets (Groups).
func NewGroupTable(devices, prefs, segments string, log *slog.Logger, opts ...kgo.Opt) (*Table, error) {
	read := []string{devices, prefs}
	if segments != "" {
		read = append(read, segments)
	}
	opts = append([]kgo.Opt{
		kgo.ConsumeTopics(read...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("route: table client: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	t := &Table{devicesT: devices, prefsT: prefs, segmentsT: segments, cl: cl, adm: kadm.NewClient(cl), log: log,
		devices: map[string]map[string]schemas.Device{}, prefs: map[string]schemas.Preferences{},
		segs: map[string]schemas.Segment{},
		next: map[string]map[int32]int64{devices: {}, prefs: {}, segments: {}}}
	t.changed = sync.NewCond(&t.mu)
	return t, nil
}

// Run reads both topics until ctx ends, then closes the client.
func (t *Table) Run(ctx context.Context) error {
	defer t.cl.Close()
	defer func() {
		t.mu.Lock()
		if t.err == nil {
			t.err = errors.New("route: table stopped")
		}
		t.changed.Broadcast()
		t.mu.Unlock()
	}()
	for {
		fs := t.cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				t.log.Warn("route table: fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		t.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				t.apply(r)
			}
			t.next[r.Topic][r.Partition] = r.Offset + 1
		})
		t.changed.Broadcast()
		t.mu.Unlock()
	}
}

// apply takes one record; t.mu is held.
func (t *Table) apply(r *kgo.Record) {
	key := string(r.Key)
	switch r.Topic {
	case t.devicesT:
		rk := schemas.RecipientPrefix(key)
		if r.Value == nil {
			id, err := url.PathUnescape(key[min(len(rk)+1, len(key)):])
			if err == nil {
				delete(t.devices[rk], id)
				if len(t.devices[rk]) == 0 {
					delete(t.devices, rk)
				}
			}
			return
		}
		var d schemas.Device
		if err := schemas.Decode(r.Value, &d); err != nil {
			t.log.Warn("route table: skip undecodable device", "key", key, "err", err)
			return
		}
		if t.devices[rk] == nil {
			t.devices[rk] = map[string]schemas.Device{}
		}
		t.devices[rk][d.DeviceID] = d
	case t.prefsT:
		if r.Value == nil {
			delete(t.prefs, key)
			return
		}
		var p schemas.Preferences
		if err := schemas.Decode(r.Value, &p); err != nil {
			t.log.Warn("route table: skip undecodable preferences", "key", key, "err", err)
			return
		}
		t.prefs[key] = p
	case t.segmentsT:
		if r.Value == nil {
			delete(t.segs, key)
			return
		}
		var sg schemas.Segment
		if err := schemas.Decode(r.Value, &sg); err != nil {
			t.log.Warn("route table: skip undecodable segment", "key", key, "err", err)
			return
		}
		t.segs[key] = sg
	}
}

// Members implements Groups (group.go): all and tag scan every device.
func (t *Table) Members(tenant string, g Group) ([]string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var users []string
	switch g.Kind {
	case GroupSegment:
		sg, ok := t.segs[schemas.RecipientKey(tenant, g.Name)]
		if !ok {
			return nil, false
		}
		users = slices.Clone(sg.Members)
	case GroupAll, GroupTag:
		for _, ds := range t.devices {
			for _, d := range ds {
				if d.Tenant == tenant && d.Enabled && d.RetiredReason == "" && (g.Kind == GroupAll || slices.Contains(d.Tags, g.Name)) {
					users = append(users, d.Recipient)
					break
				}
			}
		}
	}
	slices.Sort(users)
	return slices.Compact(users), true
}

// SyncGroups implements Groups: SyncAll, segments included.
func (t *Table) SyncGroups(ctx context.Context) error { return t.sync(ctx, nil) }

// Recipient implements Directory: the devices sorted by id.
func (t *Table) Recipient(tenant, recipient string) Recipient {
	rk := schemas.RecipientKey(tenant, recipient)
	t.mu.Lock()
	defer t.mu.Unlock()
	var who Recipient
	for _, d := range t.devices[rk] {
		who.Devices = append(who.Devices, d)
	}
	sort.Slice(who.Devices, func(i, j int) bool { return who.Devices[i].DeviceID < who.Devices[j].DeviceID })
	if p, ok := t.prefs[rk]; ok {
		who.Prefs = &p
	}
	return who
}

// Sync implements Directory for partition p; SyncAll is Sync for every
// partition (before the stage starts).
func (t *Table) Sync(ctx context.Context, p int32) error { return t.sync(ctx, &p) }

// SyncAll waits until the table has read both topics to their ends.
func (t *Table) SyncAll(ctx context.Context) error { return t.sync(ctx, nil) }

func (t *Table) sync(ctx context.Context, p *int32) error {
	listed := []string{t.devicesT, t.prefsT}
	if t.segmentsT != "" && p == nil {
		listed = append(listed, t.segmentsT)
	}
	ends, err := t.adm.ListCommittedOffsets(ctx, listed...)
	if err != nil {
		return fmt.Errorf("route: table: list end offsets: %w", err)
	}
	want := map[string]map[int32]int64{}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if p != nil && o.Partition != *p {
			return
		}
		if o.Err != nil {
			lerr = fmt.Errorf("route: table: end offset of %s/%d: %w", o.Topic, o.Partition, o.Err)
			return
		}
		if o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = map[int32]int64{}
			}
			want[o.Topic][o.Partition] = o.Offset
		}
	})
	if lerr != nil {
		return lerr
	}
	stop := context.AfterFunc(ctx, func() {
		t.mu.Lock()
		t.changed.Broadcast()
		t.mu.Unlock()
	})
	defer stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		behind := false
		for topic, ps := range want {
			for part, end := range ps {
				if t.next[topic][part] < end {
					behind = true
				}
			}
		}
		if !behind {
			return nil
		} else if ctx.Err() != nil {
			return fmt.Errorf("route: table: sync: %w", ctx.Err())
		} else if t.err != nil {
			return t.err
		}
		t.changed.Wait()
	}
}

// StaticDirectory is a Directory of fixed recipients, keyed by
// RecipientKey, for tests, replay and the API's explain.
type StaticDirectory map[string]Recipient

// Recipient implements Directory.
func (s StaticDirectory) Recipient(tenant, recipient string) Recipient {
	return s[schemas.RecipientKey(tenant, recipient)]
}

// Sync implements Directory: a static directory is always in sync.
func (StaticDirectory) Sync(context.Context, int32) error { return nil }
