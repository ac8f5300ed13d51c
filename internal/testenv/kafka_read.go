package testenv

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/topics"
)

// ReadCommitted returns every record of topic that a read_committed
// consumer sees, from the start of each partition up to its settled end at
// the time of the call: no more (nothing produced later) and no fewer (it
// waits for records below that offset). It works on any cluster (kfake or
// the real broker).
//
// The settled end (stage.SettledEnd) is the last stable offset once every
// transaction open at the call has finished. Kafka writes a transaction's
// commit markers after EndTransaction returns, one partition at a time, so
// right after a commit the last stable offset can still stop before it, on
// some of its partitions and not others: a test that saw a transaction's
// decision and reads its accepted record, or that committed and reads at
// once, would miss records it rightly expects. A transaction still open
// after settleWait (a producer the test left hanging on purpose) is not
// waited for further: its partition ends at its last stable offset then.
func ReadCommitted(t testing.TB, brokers []string, topic string, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := Client(t, brokers, append([]kgo.Opt{
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, opts...)...)
	ends := settledEnds(ctx, t, cl, topic)
	pos := map[int32]int64{}
	done := func() bool {
		for p, end := range ends {
			if pos[p] < end {
				return false
			}
		}
		return true
	}
	var out []*kgo.Record
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: %v (positions %v, ends %v)", topic, err, pos, ends)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("read %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// settleWait bounds how long ReadCommitted waits for the transactions open
// at its call to finish; commit markers take milliseconds to write.
const settleWait = 5 * time.Second

func settledEnds(ctx context.Context, t testing.TB, cl *kgo.Client, topic string) map[int32]int64 {
	t.Helper()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	ends := map[int32]int64{}
	for _, p := range td[topic].Partitions.Numbers() {
		end, err := stage.SettledEnd(wait, cl, topic, p, quiet)
		if err == nil {
			ends[p] = end
			continue
		}
		if wait.Err() == nil {
			t.Fatalf("read %s/%d: %v", topic, p, err)
		}
		lso, err := stage.LastStableOffsets(ctx, cl, topic, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("read %s/%d: a transaction is still open after %v; reading up to the last stable offset %d", topic, p, settleWait, lso[p])
		ends[p] = lso[p]
	}
	return ends
}

// Catalog creates every topic of a catalog with a unique prefix (replication
// 1, the given partitions) and deletes them in t's cleanup.
func Catalog(t testing.TB, brokers []string, partitions int32) *topics.Catalog {
	t.Helper()
	return CatalogWith(t, brokers, topics.Options{Partitions: partitions})
}

// CatalogWith is Catalog with more options; the prefix is always unique and
// replication is 1.
func CatalogWith(t testing.TB, brokers []string, o topics.Options) *topics.Catalog {
	t.Helper()
	o.Prefix, o.Replication = uniqueName(t, "t", 40)+".", 1
	cat := topics.New(o)
	adm := kadm.NewClient(Client(t, brokers))
	ctx, cancel := context.WithTimeout(context.Background(), topicSetupTimeout)
	defer cancel()
	DeleteCatalogOnCleanup(t, adm, cat)
	// The prefix is new: Create makes every topic and waits until it is
	// ready.
	if _, err := cat.Create(ctx, adm); err != nil {
		t.Fatal(err)
	}
	return cat
}

// DeleteCatalogOnCleanup deletes every topic of cat when t ends.
func DeleteCatalogOnCleanup(t testing.TB, adm *kadm.Client, cat *topics.Catalog) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), topicSetupTimeout)
		defer cancel()
		if _, err := cat.Delete(ctx, adm); err != nil {
			t.Logf("delete the test's topics: %v", err)
		}
	})
}
