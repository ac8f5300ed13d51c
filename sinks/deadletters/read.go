package deadletters

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/catchup"
)

// Read reads herald.deadletters (topic) whole, read_committed, up to its
// last stable offsets as of the call: every dead letter and redrive marker
// committed by then. It keeps only the dead letters f selects (but for
// f.Redriven, which Set.Select applies), so its memory is bounded by what
// is asked for, not by the topic. opts connect to the brokers
// (kgo.SeedBrokers and the connection options).
func Read(ctx context.Context, topic string, f Filter, opts ...kgo.Opt) (*Set, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return nil, fmt.Errorf("deadletters: client: %w", err)
	}
	defer cl.Close()
	track, err := catchup.New(ctx, cl, topic)
	if err != nil {
		return nil, fmt.Errorf("deadletters: read %s: %w", topic, err)
	}
	s := newSet()
	f.Redriven = ""
	for !track.Done() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("deadletters: read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("deadletters: read %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if track.Done() {
				return
			}
			if !r.Attrs.IsControl() {
				s.add(r, f)
			}
			track.Saw(r)
		})
	}
	s.link()
	return s, nil
}
