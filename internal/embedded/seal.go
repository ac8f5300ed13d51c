package embedded

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// openTxn is a transaction a partition's log leaves open: a producer whose
// last batch there is transactional data, not a marker.
type openTxn struct {
	topic     string
	partition int32
	producer  int64
	epoch     int16
}

// abortCrashedTransactions writes the abort marker of every transaction
// the log leaves open (defect 5). It must run before any client of this
// start writes: every producer in the log then belongs to an earlier run
// (defect 2's fresh transactional ids), so a transaction still open is one
// a crash interrupted, which kfake already treats as aborted without a
// marker. The marker changes no outcome; it ends the transaction where
// readers can see it. It returns how many markers it wrote.
func abortCrashedTransactions(ctx context.Context, brokers []string) (int, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, ClientOpts()...)...)
	if err != nil {
		return 0, fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	open, err := findOpenTransactions(ctx, cl)
	if err != nil {
		return 0, err
	}
	if len(open) == 0 {
		return 0, nil
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	for _, o := range open {
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch, m.Committed = o.producer, o.epoch, false
		mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		mt.Topic, mt.Partitions = o.topic, []int32{o.partition}
		m.Topics = append(m.Topics, mt)
		req.Markers = append(req.Markers, m)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("write abort markers: %w", err)
	}
	for _, m := range resp.Markers {
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return 0, fmt.Errorf("write abort marker of producer %d on %s/%d: %w", m.ProducerID, t.Topic, p.Partition, err)
				}
			}
		}
	}
	return len(open), nil
}

// findOpenTransactions reads every partition of every topic, uncommitted,
// from its start to its high watermark and returns the transactions left
// open there, sorted.
func findOpenTransactions(ctx context.Context, cl *kgo.Client) ([]openTxn, error) {
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx)
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	if err := errorIn(starts, ends); err != nil {
		return nil, err
	}
	type tp struct {
		topic     string
		partition int32
	}
	type last struct {
		epoch int16
		open  bool
	}
	want := map[string]map[int32]kgo.Offset{}
	end := map[tp]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		start, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Offset <= start.Offset {
			return
		}
		if want[o.Topic] == nil {
			want[o.Topic] = map[int32]kgo.Offset{}
		}
		want[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
		end[tp{o.Topic, o.Partition}] = o.Offset
	})
	if len(end) == 0 {
		return nil, nil
	}
	rd, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...),
		kgo.ConsumePartitions(want),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(),
	}, ClientOpts()...)...)
	if err != nil {
		return nil, fmt.Errorf("reader: %w", err)
	}
	defer rd.Close()
	producers := map[tp]map[int64]last{}
	for left := len(end); left > 0; {
		// read_uncommitted returns every offset up to the high
		// watermark, markers included, so the last one arrives, unless
		// compaction removed it: nothing for 10 s on an idle local
		// cluster means every partition is read.
		pollCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fetches := rd.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if fetches.NumRecords() == 0 {
			break
		}
		var ferr error
		fetches.EachError(func(topic string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.DeadlineExceeded) {
				ferr = fmt.Errorf("read %s/%d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			e, ok := end[k]
			if !ok || r.Offset >= e {
				return
			}
			if r.Attrs.IsTransactional() {
				if producers[k] == nil {
					producers[k] = map[int64]last{}
				}
				producers[k][r.ProducerID] = last{epoch: r.ProducerEpoch, open: !r.Attrs.IsControl()}
			}
			if r.Offset == e-1 {
				delete(end, k)
				left--
			}
		})
	}
	var open []openTxn
	for k, ps := range producers {
		for pid, l := range ps {
			if l.open {
				open = append(open, openTxn{topic: k.topic, partition: k.partition, producer: pid, epoch: l.epoch})
			}
		}
	}
	sort.Slice(open, func(i, j int) bool {
		a, b := open[i], open[j]
		if a.topic != b.topic {
			return a.topic < b.topic
		}
		if a.partition != b.partition {
			return a.partition < b.partition
		}
		return a.producer < b.producer
	})
	return open, nil
}

// errorIn returns the first error of a listing.
func errorIn(ls ...kadm.ListedOffsets) error {
	for _, l := range ls {
		if err := l.Error(); err != nil {
			return fmt.Errorf("list offsets: %w", err)
		}
	}
	return nil
}
