package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// WaitCommitted polls until group has committed offsets summing to at
// least n on topic (every input record of a benchmark processed), failing
// after five minutes.
func WaitCommitted(t testing.TB, brokers []string, group, topic string, n int64) {
	t.Helper()
	adm := kadm.NewClient(Client(t, brokers))
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err == nil {
			var sum int64
			offs.Each(func(o kadm.OffsetResponse) {
				if o.Topic == topic {
					sum += o.At
				}
			})
			if sum >= n {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("testenv: group %s did not commit %d offsets of %s in time", group, n, topic)
}

// WaitCaughtUp polls until group's committed offsets on topic are past
// every record the topic holds now, partition by partition, failing after
// two minutes. Unlike WaitCommitted it does not count records, so
// transaction markers between them (a topic written transactionally)
// cannot make it return early.
func WaitCaughtUp(t testing.TB, brokers []string, group, topic string, opts ...kgo.Opt) {
	t.Helper()
	end := map[int32]int64{}
	for _, r := range ReadCommitted(t, brokers, topic, opts...) {
		end[r.Partition] = max(end[r.Partition], r.Offset+1)
	}
	adm := kadm.NewClient(Client(t, brokers, opts...))
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		offs, err := adm.FetchOffsets(context.Background(), group)
		behind := len(end)
		if err == nil {
			for p, e := range end {
				if o, ok := offs.Lookup(topic, p); ok && o.At >= e {
					behind--
				}
			}
		}
		if behind == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: group %s has not committed past the end of %s on %d partitions (err %v)", group, topic, behind, err)
		}
	}
}
