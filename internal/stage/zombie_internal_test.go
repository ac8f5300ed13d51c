package stage

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestATransactionWithNoInputIsFencedByTheGroup: a member its group has
// dropped (a zombie woken from a pause longer than its session timeout)
// does not know it yet, so its revoked-or-lost check passes; a
// transaction with no input (timers, a sink's results round) must still
// not commit, or it writes outputs of partitions another instance has
// restored and is writing (chaos seed 47: 794 second outcomes of an APNs
// sink woken from a 13 s SIGSTOP). The coordinator is the one who knows:
// the transaction commits the group's committed offsets once more, and
// the coordinator's refusal of the member aborts it.
func TestATransactionWithNoInputIsFencedByTheGroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refuse  error // the coordinator's answer to the transaction's offset commit, nil: accepted
		commits bool
	}{
		{"a transaction with no input by a member the coordinator no longer knows is aborted, and its tasks are told", kerr.UnknownMemberID, false},
		{"a transaction with no input by a member of an older generation is aborted", kerr.IllegalGeneration, false},
		{"a transaction with no input by a member in good standing commits, its offsets unchanged", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()

			// The group has committed offsets of both partitions, as
			// after any transaction with input.
			admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			var offsets kadm.Offsets
			offsets.AddOffset("in", 0, 0, -1)
			offsets.AddOffset("in", 1, 0, -1)
			if err := kadm.NewClient(admin).CommitAllOffsets(ctx, "g", offsets); err != nil {
				t.Fatal(err)
			}

			cfg := minimalConfig()
			cfg.Brokers = c.ListenAddrs()
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("tx"),
				kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
				kgo.FetchMaxWait(100*time.Millisecond), kgo.MetadataMinAge(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sess.Close)
			r.sess = sess
			var events []string
			r.tasks = map[int32]Task{0: &ticking{p: 0, events: &events}, 1: &ticking{p: 1, events: &events}}
			// A first transaction before the session joins its group
			// (it joins on its first poll): it commits no offsets, and
			// the client learns where the outputs go.
			if committed, _, err := r.transact(ctx, nil); err != nil || !committed {
				t.Fatalf("the first transaction: committed %v, err %v", committed, err)
			}
			events = events[:0]
			for len(sess.Client().CommittedOffsets()["in"]) < 2 {
				if ctx.Err() != nil {
					t.Fatal("the session never joined its group and fetched its offsets")
				}
				sess.PollFetches(ctx)
			}

			var asked atomic.Int32
			c.ControlKey(int16(kmsg.TxnOffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				asked.Add(1)
				if tc.refuse == nil {
					return nil, nil, false
				}
				req := kreq.(*kmsg.TxnOffsetCommitRequest)
				resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
				for _, rt := range req.Topics {
					st := kmsg.NewTxnOffsetCommitResponseTopic()
					st.Topic = rt.Topic
					for _, rp := range rt.Partitions {
						sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
						sp.Partition = rp.Partition
						sp.ErrorCode = tc.refuse.(*kerr.Error).Code
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp, nil, true
			})

			committed, _, err := r.transact(ctx, nil)
			if err != nil {
				t.Fatalf("the transaction: %v", err)
			}
			if asked.Load() == 0 {
				t.Fatal("the transaction with no input sent no offset commit: nothing let the coordinator fence it")
			}
			if committed != tc.commits {
				t.Fatalf("the transaction committed: %v, want %v", committed, tc.commits)
			}
			slices.Sort(events)
			want := []string{"0:abort", "0:tick", "1:abort", "1:tick"}
			if tc.commits {
				want = []string{"0:commit", "0:tick", "1:commit", "1:tick"}
			}
			if !slices.Equal(events, want) {
				t.Fatalf("the tasks were told %v, want %v", events, want)
			}

			// A read_committed reader sees the outputs only of a
			// committed transaction, and the group's offsets are those
			// it had.
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("out"),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var got []string
			atEnd := map[int32]bool{}
			for len(atEnd) < 2 && ctx.Err() == nil {
				cl.PollFetches(ctx).EachPartition(func(p kgo.FetchTopicPartition) {
					for _, rec := range p.Records {
						got = append(got, fmt.Sprintf("%d:%s", rec.Partition, rec.Value))
					}
					if p.HighWatermark > 0 && p.LastStableOffset == p.HighWatermark {
						atEnd[p.Partition] = true
					}
				})
			}
			slices.Sort(got)
			wantOut := []string{"0:round 1", "1:round 1"}
			if tc.commits {
				wantOut = []string{"0:round 1", "0:round 2", "1:round 1", "1:round 2"}
			}
			if !slices.Equal(got, wantOut) {
				t.Fatalf("a read_committed reader saw %v, want %v", got, wantOut)
			}
		})
	}
}
