package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
