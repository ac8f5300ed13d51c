package catchup_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/catchup"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
)

// TestTheTrackerIsDoneAtTheLastStableOffsetsOfItsStart: records committed
// in a transaction (its markers written) before the tracker is made must
// all be read (their commit marker included) before it is done; an empty
// topic is done at once; records written after it do not hold it back.
func TestTheTrackerIsDoneAtTheLastStableOffsetsOfItsStart(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := context.Background()
	t.Run("an empty topic is done at once", func(t *testing.T) {
		topic := testenv.Topic(t, brokers, 2, nil)
		tr, err := catchup.New(ctx, testenv.Client(t, brokers), topic)
		if err != nil || !tr.Done() {
			t.Fatalf("done %v, err %v; want done", tr != nil && tr.Done(), err)
		}
	})
	t.Run("a transactional topic is done after its last commit marker, not before", func(t *testing.T) {
		topic := testenv.Topic(t, brokers, 2, nil)
		w := testenv.Client(t, brokers, kgo.TransactionalID("catchup-"+topic), kgo.DefaultProduceTopic(topic))
		if err := w.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"a", "b", "c", "d"} {
			if err := w.ProduceSync(ctx, &kgo.Record{Key: []byte(k), Value: []byte(k)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		// EndTransaction returns once the coordinator has logged the
		// commit; it writes the commit markers after, and only then does
		// the last stable offset pass the records (a tracker made before
		// that is rightly done at once: nothing is committed yet as a
		// read_committed reader sees it). Wait for the markers, as the
		// stages' restore does.
		for p := range int32(2) {
			if _, err := stage.SettledEnd(ctx, w, topic, p, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
		}
		r := testenv.Client(t, brokers, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
		tr, err := catchup.New(ctx, r, topic)
		if err != nil || tr.Done() {
			t.Fatalf("done %v, err %v; want not done", tr != nil && tr.Done(), err)
		}
		data, markers := 0, 0
		pollCtx, cancel := context.WithTimeout(ctx, time.Minute) // a guard against a hang
		defer cancel()
		for !tr.Done() {
			fs := r.PollFetches(pollCtx)
			if pollCtx.Err() != nil {
				t.Fatalf("never done after %d records and %d markers", data, markers)
			}
			fs.EachRecord(func(rec *kgo.Record) {
				if rec.Attrs.IsControl() {
					markers++
				} else {
					data++
				}
				tr.Saw(rec)
			})
		}
		if data != 4 || markers == 0 {
			t.Fatalf("done after %d records and %d markers, want all 4 and their markers", data, markers)
		}
	})
}

// TestFollowReportsHowFarBehindItIs: with a Lag, Follow reports each
// partition it has read records from, caught up (0) once ready; without
// one it reports nothing and still follows.
func TestFollowReportsHowFarBehindItIs(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := testenv.Guarded(t)
	topic := testenv.Topic(t, brokers, 2, nil)
	w := testenv.Client(t, brokers, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range int32(2) {
		for _, k := range []string{"a", "b", "c"} {
			if err := w.ProduceSync(ctx, &kgo.Record{Key: []byte(k), Value: []byte(k), Partition: p}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, withLag := range []bool{true, false} {
		name := "with a lag, each partition read is reported, caught up"
		if !withLag {
			name = "without a lag, nothing is reported"
		}
		t.Run(name, func(t *testing.T) {
			reg := metrics.NewRegistry()
			var lag *metrics.Lag
			if withLag {
				lag = metrics.ConsumerLag(reg, "follower")
			}
			r := testenv.Client(t, brokers, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
			fctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ready, applied := make(chan struct{}), 0
			done := make(chan error, 1)
			go func() {
				done <- catchup.Follow(fctx, r, []string{topic}, slog.Default(), lag, func(*kgo.Record) { applied++ }, func() { close(ready) })
			}()
			select {
			case <-ready:
			case <-ctx.Done():
				t.Fatal("Follow never caught up")
			}
			cancel()
			if err := <-done; err != nil || applied != 6 {
				t.Fatalf("Follow returned %v after %d records, want nil after 6", err, applied)
			}
			hs := httptest.NewServer(reg.Handler())
			defer hs.Close()
			m := testenv.Scrape(t, hs.URL)
			for _, p := range []string{"0", "1"} {
				v, ok := m.Value("herald_consumer_lag_records", "consumer", "follower", "topic", topic, "partition", p)
				if withLag && (!ok || v != 0) {
					t.Fatalf("partition %s: lag %v (reported %v), want 0", p, v, ok)
				}
				if !withLag && ok {
					t.Fatalf("partition %s: lag %v reported without a Lag", p, v)
				}
			}
		})
	}
}

// TestFollowRidesOutAFailedListingOfTheLastStableOffsets: the listing of
// the last stable offsets a copy catches up to fails during a broker
// bounce or a leader election. Follow used to return that error, and the
// webhook sink exited with it (the nemesis suite, scripts/chaos, found
// it); it must list them again and become ready.
func TestFollowRidesOutAFailedListingOfTheLastStableOffsets(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "copy"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w := testenv.Client(t, c.ListenAddrs(), kgo.DefaultProduceTopic("copy"))
	if err := w.ProduceSync(context.Background(), &kgo.Record{Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The first two read_committed listings of the latest offsets fail
	// (the consumer's own listings of the earliest offsets pass).
	failed := testenv.FailLatestOffsetListings(c, 2, func(req *kmsg.ListOffsetsRequest) bool { return req.IsolationLevel == 1 })
	r := testenv.Client(t, c.ListenAddrs(), kgo.ConsumeTopics("copy"), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	var applied atomic.Int32
	errc := make(chan error, 1)
	go func() {
		errc <- catchup.Follow(ctx, r, []string{"copy"}, slog.New(slog.DiscardHandler), nil,
			func(*kgo.Record) { applied.Add(1) }, func() { close(ready) })
	}()
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("Follow returned %v before the copy was ready (%d listings failed)", err, failed.Load())
	}
	if failed.Load() != 2 || applied.Load() != 1 {
		t.Errorf("%d listings failed, %d records applied; want 2 and 1", failed.Load(), applied.Load())
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Follow returned %v after ctx ended; want nil", err)
	}
}
