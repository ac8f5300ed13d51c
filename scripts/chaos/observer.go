package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// pos is a record's place in the log.
type pos struct {
	topic     string
	partition int32
	offset    int64
}

// view is what a read_committed reader of the audited topics saw.
type view struct {
	positions  map[pos]bool
	decisions  []schemas.Decision
	attempts   []schemas.Attempt
	outcomes   []schemas.Outcome
	commands   map[string]int // delivery id → delivery commands read
	requests   int
	byTopic    map[string]int // records per audited topic
	decodeErrs int
}

func newView() *view {
	return &view{positions: map[pos]bool{}, commands: map[string]int{}, byTopic: map[string]int{}}
}

func (v *view) add(r *kgo.Record, short string) {
	v.positions[pos{r.Topic, r.Partition, r.Offset}] = true
	v.byTopic[short]++
	var err error
	switch short {
	case topics.Requests:
		v.requests++
	case topics.Decisions:
		var d schemas.Decision
		if err = schemas.Decode(r.Value, &d); err == nil {
			v.decisions = append(v.decisions, d)
		}
	case topics.Attempts:
		var a schemas.Attempt
		if err = schemas.Decode(r.Value, &a); err == nil {
			v.attempts = append(v.attempts, a)
		}
	case topics.Outcomes:
		var o schemas.Outcome
		if err = schemas.Decode(r.Value, &o); err == nil {
			v.outcomes = append(v.outcomes, o)
		}
	default: // a deliveries topic
		var c schemas.DeliveryCommand
		if err = schemas.Decode(r.Value, &c); err == nil {
			v.commands[c.DeliveryID]++
		}
	}
	if err != nil {
		v.decodeErrs++
	}
}

// auditedTopics are the short names the observer reads.
func auditedTopics(channels []string) []string {
	out := []string{topics.Requests, topics.Decisions, topics.Attempts, topics.Outcomes}
	for _, c := range channels {
		out = append(out, topics.Deliveries(c))
	}
	return out
}

// observer is a read_committed consumer that runs through the faults.
type observer struct {
	cl    *kgo.Client
	short map[string]string // full topic name → short name
	mu    sync.Mutex
	v     *view
	errs  int
}

func newObserver(brokers []string, cat *topics.Catalog, channels []string) (*observer, error) {
	o := &observer{short: map[string]string{}, v: newView()}
	var names []string
	for _, s := range auditedTopics(channels) {
		o.short[cat.Name(s)] = s
		names = append(names, cat.Name(s))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, fmt.Errorf("observer: %w", err)
	}
	o.cl = cl
	return o, nil
}

func (o *observer) run(ctx context.Context) {
	for ctx.Err() == nil {
		fs := o.cl.PollFetches(ctx)
		o.mu.Lock()
		fs.EachError(func(string, int32, error) { o.errs++ })
		fs.EachRecord(func(r *kgo.Record) { o.v.add(r, o.short[r.Topic]) })
		o.mu.Unlock()
	}
}

// snapshot runs f on the view under the lock.
func (o *observer) snapshot(f func(*view)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f(o.v)
}

// readAll reads every audited topic to its end, read_committed, with a
// fresh client: the committed truth at the end of the run.
func readAll(ctx context.Context, brokers []string, cat *topics.Catalog, channels []string) (*view, error) {
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	short := map[string]string{}
	var names []string
	for _, s := range auditedTopics(channels) {
		short[cat.Name(s)] = s
		names = append(names, cat.Name(s))
	}
	ends, err := kadm.NewClient(adm).ListCommittedOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("read: last stable offsets: %w", err)
	}
	want := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = map[int32]int64{}
			}
			want[o.Topic][o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	v := newView()
	at := map[string]map[int32]int64{}
	done := func() bool {
		for t, ps := range want {
			for p, end := range ps {
				if at[t][p] < end {
					return false
				}
			}
		}
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read: %w", ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if at[r.Topic] == nil {
				at[r.Topic] = map[int32]int64{}
			}
			at[r.Topic][r.Partition] = r.Offset + 1
			if r.Offset >= want[r.Topic][r.Partition] || r.Attrs.IsControl() {
				return
			}
			v.add(r, short[r.Topic])
		})
	}
	return v, nil
}
