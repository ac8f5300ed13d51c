package deadletters

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// HeaderRedriveInput marks a stage's input written again by a redrive: its
// value is the dead letter's id. The record goes to the partition it was
// read from (redrivePartitioner), whatever its key hashes to, so it meets
// the same stage state as the first time.
const HeaderRedriveInput = "herald-redrive-input"

// input fetches the committed record at topic/partition@offset: what a
// stage's dead letter names. It returns nil, with no error, when the log
// no longer has it (past its retention, compacted, or in an aborted
// transaction).
func input(ctx context.Context, opts []kgo.Opt, topic string, partition int32, offset int64) (*kgo.Record, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return nil, fmt.Errorf("deadletters: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("deadletters: offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("deadletters: offsets of %s: %w", topic, err)
	}
	start, ok1 := starts.Lookup(topic, partition)
	end, ok2 := ends.Lookup(topic, partition)
	if !ok1 || !ok2 || start.Err != nil || end.Err != nil {
		return nil, fmt.Errorf("deadletters: %s/%d has no offsets", topic, partition)
	}
	if offset < start.Offset || offset >= end.Offset {
		return nil, nil
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("deadletters: read %s/%d@%d: %w", topic, partition, offset, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = err
			}
		})
		if ferr != nil {
			return nil, fmt.Errorf("deadletters: read %s/%d@%d: %w", topic, partition, offset, ferr)
		}
		var found *kgo.Record
		past := false
		fs.EachRecord(func(r *kgo.Record) {
			if found != nil || past || r.Offset < offset {
				return
			}
			if r.Offset == offset && !r.Attrs.IsControl() {
				found = r
				return
			}
			past = true
		})
		if found != nil {
			return found, nil
		}
		if past {
			return nil, nil
		}
	}
}

// redrivePartitioner is the catalog's partitioner, but a stage's input
// written again (HeaderRedriveInput) goes to the partition set on it.
type redrivePartitioner struct{ base kgo.Partitioner }

func (p redrivePartitioner) ForTopic(t string) kgo.TopicPartitioner {
	return redriveTopicPartitioner{p.base.ForTopic(t)}
}

type redriveTopicPartitioner struct{ kgo.TopicPartitioner }

func (tp redriveTopicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	if _, ok := headerOf(r.Headers, HeaderRedriveInput); ok {
		return true
	}
	return tp.TopicPartitioner.RequiresConsistency(r)
}

func (tp redriveTopicPartitioner) Partition(r *kgo.Record, n int) int {
	if _, ok := headerOf(r.Headers, HeaderRedriveInput); ok {
		return int(r.Partition)
	}
	return tp.TopicPartitioner.Partition(r, n)
}
