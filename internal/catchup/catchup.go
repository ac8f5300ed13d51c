// Package catchup owns one question every in-memory copy of compacted
// topics asks (the API's replica, the webhook endpoints table): has a
// consumer reading the topics from their start read every partition up to
// its last stable offset as of a given moment? Until then the copy is
// partial and must not answer.
package catchup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
)

// Tracker follows a read_committed consumer of some topics towards the
// last stable offsets the topics had when it was made. The consumer must
// keep control records (kgo.KeepControlRecords) and pass them to Saw: a
// partition whose last record is a commit marker is otherwise never
// reached.
type Tracker struct {
	behind map[string]map[int32]int64
}

// New lists the topics' last stable offsets (read_committed end offsets)
// now.
func New(ctx context.Context, cl *kgo.Client, topics ...string) (*Tracker, error) {
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("catchup: list offsets: %w", err)
	}
	t := &Tracker{behind: map[string]map[int32]int64{}}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = fmt.Errorf("catchup: offsets of %s/%d: %w", o.Topic, o.Partition, o.Err)
			return
		}
		if o.Offset > 0 {
			if t.behind[o.Topic] == nil {
				t.behind[o.Topic] = map[int32]int64{}
			}
			t.behind[o.Topic][o.Partition] = o.Offset
		}
	})
	if lerr != nil {
		return nil, lerr
	}
	return t, nil
}

// Done reports whether every partition has been read up to its offset.
func (t *Tracker) Done() bool { return len(t.behind) == 0 }

// Saw notes one record read (control records included) and reports Done.
func (t *Tracker) Saw(rec *kgo.Record) bool {
	if end, ok := t.behind[rec.Topic][rec.Partition]; ok && rec.Offset+1 >= end {
		delete(t.behind[rec.Topic], rec.Partition)
		if len(t.behind[rec.Topic]) == 0 {
			delete(t.behind, rec.Topic)
		}
	}
	return t.Done()
}

// Follow reads the topics with cl (read_committed, from their start,
// keeping control records) until ctx ends or the client closes: apply
// gets every data record, and ready is called once, when the consumer has
// read every partition up to its last stable offset as of the call (at
// once for empty topics). lag, when not nil, reports how far behind each
// partition the consumer is, at each fetch with records. Listing the last
// stable offsets is tried again, with a backoff up to 5 s and a warning,
// until it succeeds or ctx ends: a broker bounce or a leader election
// fails it for a while (a copy that gave up made its process exit, found
// by the nemesis suite, scripts/chaos), and the copy stays not ready
// meanwhile. It returns when ctx ends or the client closes, always nil
// (the error result is kept for its callers).
func Follow(ctx context.Context, cl *kgo.Client, topics []string, log *slog.Logger, lag *metrics.Lag, apply func(*kgo.Record), ready func()) error {
	var track *Tracker
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		var err error
		if track, err = New(ctx, cl, topics...); err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("cannot list the last stable offsets to catch up to; trying again", "topics", topics, "err", err, "backoff", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	done := track.Done()
	if done {
		ready()
	}
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		lag.Observe(fs)
		fs.EachRecord(func(rec *kgo.Record) {
			if !rec.Attrs.IsControl() {
				apply(rec)
			}
			if !done && track.Saw(rec) {
				done = true
				ready()
			}
		})
	}
}
