package testenv

import (
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kfake starts an in-process kfake cluster of one broker for a fast test
// (opts add to it), closed when the test ends. kfake's known defects are
// in DESIGN.md: the exactly-once and crash claims are proven on the real
// broker (Kafka), never on it alone.
func Kfake(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// FailLatestOffsetListings makes c answer the first n ListOffsets requests
// for the latest offsets that match with UNKNOWN_SERVER_ERROR on every
// partition asked for (a broker bouncing under the listing); the others
// pass. It returns how many it failed so far.
func FailLatestOffsetListings(c *kfake.Cluster, n int32, match func(*kmsg.ListOffsetsRequest) bool) *atomic.Int32 {
	var failed atomic.Int32
	c.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ListOffsetsRequest)
		if len(req.Topics) == 0 || len(req.Topics[0].Partitions) == 0 || req.Topics[0].Partitions[0].Timestamp != -1 ||
			!match(req) || failed.Load() >= n {
			return nil, nil, false
		}
		failed.Add(1)
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.UnknownServerError.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return &failed
}
