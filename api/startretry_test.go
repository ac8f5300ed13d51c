package api

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/topics"
)

// TestStartRidesOutAFailedListingOfTheRepliesEndOffsets: an API starting
// while a broker is bounced can fail to list herald.replies' end offsets
// for a while. Start used to return that error and herald api exited
// (the nemesis suite, scripts/chaos, found it); it must list them again
// and start.
func TestStartRidesOutAFailedListingOfTheRepliesEndOffsets(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cat := topics.New(topics.Options{Prefix: "restart.", Partitions: 2, Replication: 1})
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, embedded.ClientOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cat.Create(ctx, kadm.NewClient(cl)); err != nil {
		t.Fatal(err)
	}
	replies := cat.Name(topics.Replies)
	failed := testenv.FailLatestOffsetListings(c, 2, func(req *kmsg.ListOffsetsRequest) bool { return req.Topics[0].Topic == replies })
	srv, err := New(Config{Brokers: c.ListenAddrs(), Catalog: cat, Keys: testKeys(), InstanceID: "restart",
		Logger: slog.New(slog.DiscardHandler), ClientOpts: embedded.ClientOpts()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Start(ctx); err != nil {
		t.Fatalf("Start after %d failed listings: %v", failed.Load(), err)
	}
	if failed.Load() != 2 {
		t.Errorf("%d listings of %s failed; want 2", failed.Load(), replies)
	}
}
