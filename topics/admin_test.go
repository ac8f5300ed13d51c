package topics_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/topics"
)

// clusters runs a test against kfake (always) and the real broker (full
// suite), as franz-go tests its client against both.
func clusters(t *testing.T, test func(t *testing.T, adm *kadm.Client)) {
	t.Run("on kfake", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close) // after the clients, which close in later-registered cleanups
		test(t, admin(t, c.ListenAddrs()))
	})
	t.Run("on the real Kafka broker", func(t *testing.T) {
		test(t, admin(t, testenv.Kafka(t)))
	})
}

func admin(t *testing.T, brokers []string) *kadm.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func testCatalog(t *testing.T, adm *kadm.Client) *topics.Catalog {
	cat := topics.New(topics.Options{
		Prefix:      fmt.Sprintf("t%08x.herald.", rand.Uint32()),
		Partitions:  3,
		Replication: 1,
	})
	testenv.DeleteCatalogOnCleanup(t, adm, cat)
	return cat
}

// createdCatalog is testCatalog with its topics created.
func createdCatalog(t *testing.T, adm *kadm.Client) *topics.Catalog {
	t.Helper()
	cat := testCatalog(t, adm)
	if _, err := cat.Create(context.Background(), adm); err != nil {
		t.Fatal(err)
	}
	return cat
}

func TestCreateThenVerifyReportsNoDrift(t *testing.T) {
	clusters(t, func(t *testing.T, adm *kadm.Client) {
		ctx := context.Background()
		cat := testCatalog(t, adm)
		created, err := cat.Create(ctx, adm)
		if err != nil {
			t.Fatal(err)
		}
		if len(created) != len(cat.Topics()) {
			t.Fatalf("created %d topics, catalog has %d", len(created), len(cat.Topics()))
		}
		again, err := cat.Create(ctx, adm)
		if err != nil {
			t.Fatalf("second create: %v", err)
		}
		if len(again) != 0 {
			t.Fatalf("second create made %v, want nothing", again)
		}
		drift := verifyEventually(t, cat, adm, 0)
		if len(drift) != 0 {
			t.Fatalf("drift after create: %v", drift)
		}
	})
}

func TestVerifyReportsAChangedConfigAndFixConfigsRestoresIt(t *testing.T) {
	clusters(t, func(t *testing.T, adm *kadm.Client) {
		ctx := context.Background()
		cat := createdCatalog(t, adm)
		seen := cat.Name(topics.Seen)
		v := "delete"
		if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: &v}}, seen); err != nil {
			t.Fatal(err)
		}
		drift := verifyEventually(t, cat, adm, 1)
		want := topics.Drift{Topic: seen, Field: "cleanup.policy", Want: "compact", Got: "delete"}
		if len(drift) != 1 || drift[0] != want {
			t.Fatalf("drift = %v, want [%v]", drift, want)
		}
		unfixed, err := cat.FixConfigs(ctx, adm, drift)
		if err != nil || len(unfixed) != 0 {
			t.Fatalf("FixConfigs = %v, %v", unfixed, err)
		}
		if drift := verifyEventually(t, cat, adm, 0); len(drift) != 0 {
			t.Fatalf("drift after fix: %v", drift)
		}
	})
}

func TestVerifyReportsMissingTopicsAndPartitionDrift(t *testing.T) {
	clusters(t, func(t *testing.T, adm *kadm.Client) {
		ctx := context.Background()
		cat := testCatalog(t, adm)
		requests := cat.Name(topics.Requests)
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, requests); err != nil {
			t.Fatal(err)
		}
		// Until the new topic's metadata propagates, it is reported missing
		// too, which also makes len(cat.Topics())+1 drifts: wait for it.
		// Once present, requests drifts in its partitions and in the one
		// config whose broker default differs from the catalog's.
		var drift []topics.Drift
		for i := 0; i < 100; i++ {
			drift = verifyEventually(t, cat, adm, len(cat.Topics())+1)
			if !slices.ContainsFunc(drift, func(d topics.Drift) bool { return d.Topic == requests && d.Field == "topic" }) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		var missing, partitions, configs int
		for _, d := range drift {
			switch {
			case d.Field == "topic":
				missing++
			case d.Topic == requests && d.Field == "partitions":
				partitions++
				if d.Want != "3" || d.Got != "1" {
					t.Errorf("partition drift = %v", d)
				}
			case d.Topic == requests && d.Field == "message.timestamp.after.max.ms":
				configs++
			}
		}
		if missing != len(cat.Topics())-1 || partitions != 1 || configs != 1 {
			t.Fatalf("missing=%d partitions=%d configs=%d in %v", missing, partitions, configs, drift)
		}
	})
}

// verifyEventually polls Verify until it returns want drifts: metadata and
// config changes propagate asynchronously on a real broker.
func verifyEventually(t *testing.T, cat *topics.Catalog, adm *kadm.Client, want int) []topics.Drift {
	t.Helper()
	var drift []topics.Drift
	var err error
	for i := 0; i < 100; i++ {
		drift, err = cat.Verify(context.Background(), adm)
		if err == nil && len(drift) == want {
			return drift
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	return drift
}

func TestSegmentBytesIsSetOnEveryTopicWhenGiven(t *testing.T) {
	t.Run("without it the catalog leaves segment.bytes to the broker", func(t *testing.T) {
		for _, tp := range topics.New(topics.Options{}).Topics() {
			if v, ok := tp.Configs["segment.bytes"]; ok {
				t.Errorf("%s: segment.bytes %q, want none", tp.Name, v)
			}
		}
	})
	clusters(t, func(t *testing.T, adm *kadm.Client) {
		ctx := context.Background()
		cat := topics.New(topics.Options{Prefix: fmt.Sprintf("t%08x.herald.", rand.Uint32()), Partitions: 1, Replication: 1, SegmentBytes: 1 << 30})
		testenv.DeleteCatalogOnCleanup(t, adm, cat)
		if _, err := cat.Create(ctx, adm); err != nil {
			t.Fatal(err)
		}
		if drift := verifyEventually(t, cat, adm, 0); len(drift) != 0 {
			t.Fatalf("drift after create: %v", drift)
		}
		names := cat.Names()
		rcs, err := adm.DescribeTopicConfigs(ctx, names...)
		if err != nil {
			t.Fatal(err)
		}
		if len(rcs) != len(names) {
			t.Fatalf("configs of %d topics, want %d", len(rcs), len(names))
		}
		for _, rc := range rcs {
			got := ""
			for _, c := range rc.Configs {
				if c.Key == "segment.bytes" {
					got = c.MaybeValue()
				}
			}
			if rc.Err != nil || got != "1073741824" {
				t.Errorf("%s: segment.bytes %q (%v), want 1073741824", rc.Name, got, rc.Err)
			}
		}
	})
}

func TestDeleteRemovesEveryCatalogTopicAndNothingElse(t *testing.T) {
	clusters(t, func(t *testing.T, adm *kadm.Client) {
		ctx := context.Background()
		cat := createdCatalog(t, adm)
		// A topic under the same prefix that is not in the catalog.
		other := cat.Name("not-herald")
		if resp, err := adm.CreateTopic(ctx, 1, 1, nil, other); err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", other, err, resp.Err)
		}
		t.Cleanup(func() { adm.DeleteTopics(context.Background(), other) })

		want := cat.Names()
		t.Run("it deletes every topic of the catalog and names them", func(t *testing.T) {
			deleted, err := cat.Delete(ctx, adm)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(deleted, want) {
				t.Fatalf("deleted %v, want %v", deleted, want)
			}
		})
		t.Run("the cluster then has none of them, and keeps the other topic", func(t *testing.T) {
			var left []string
			for i := 0; i < 50; i++ { // deletion reaches the metadata asynchronously
				td, err := adm.ListTopics(ctx)
				if err != nil {
					t.Fatal(err)
				}
				left = left[:0]
				for _, name := range want {
					if td.Has(name) {
						left = append(left, name)
					}
				}
				if len(left) == 0 {
					if !td.Has(other) {
						t.Fatalf("%s, not in the catalog, was deleted too", other)
					}
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Fatalf("still listed after delete: %v", left)
		})
		t.Run("deleting again deletes nothing and does not fail", func(t *testing.T) {
			deleted, err := cat.Delete(ctx, adm)
			if err != nil || len(deleted) != 0 {
				t.Fatalf("deleted %v, err %v; want nothing and no error", deleted, err)
			}
		})
	})
}

// TestAwaitReadyWaitsForEveryTopicWithAllItsPartitions: topics created
// with the partitions asked for are ready; one that does not exist, or has
// fewer partitions than asked for, is not, and the error when the wait
// ends names it and why.
func TestAwaitReadyWaitsForEveryTopicWithAllItsPartitions(t *testing.T) {
	clusters(t, func(t *testing.T, adm *kadm.Client) {
		cat := createdCatalog(t, adm)
		requests, decisions := cat.Name(topics.Requests), cat.Name(topics.Decisions)
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Guard())
		defer cancel()
		if err := topics.AwaitReady(ctx, adm, 3, requests, decisions); err != nil {
			t.Fatalf("created topics not ready: %v", err)
		}
		missing := requests + ".never"
		cases := []struct {
			name       string
			partitions int32
			topics     []string
			want       []string
		}{
			{"a topic that does not exist is not ready", 3, []string{requests, missing},
				[]string{missing, "not ready"}},
			{"a topic with fewer partitions than asked for is not ready", 4, []string{decisions},
				[]string{decisions + " has 3 of 4 partitions in metadata"}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				err := topics.AwaitReady(ctx, adm, c.partitions, c.topics...)
				if err == nil {
					t.Fatal("ready")
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				if strings.Contains(err.Error(), requests+" ") || strings.HasSuffix(err.Error(), requests) {
					t.Errorf("error %q names %s, which is ready", err, requests)
				}
			})
		}
	})
}

// A broker learns of a topic just created a moment after the metadata
// answer that listed it: on a cluster just started, `herald topics create`
// created every topic and then failed its drift check with
// UNKNOWN_TOPIC_OR_PARTITION (found by scripts/chaos). kfake plays that
// broker: its first answers to DescribeConfigs say every topic is unknown.
func TestVerifyAsksAgainWhileABrokerDoesNotKnowATopicTheMetadataListed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		unknown   int // DescribeConfigs answers that say unknown
		wantError bool
	}{
		{name: "three answers that say unknown are followed by a check that finds no drift", unknown: 3},
		{name: "a topic still unknown when the context ends is an error naming it", unknown: 1 << 30, wantError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			adm := admin(t, c.ListenAddrs())
			cat := createdCatalog(t, adm)
			var asked atomic.Int64
			c.ControlKey(int16(kmsg.DescribeConfigs), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if asked.Add(1) > int64(tc.unknown) {
					return nil, nil, false
				}
				req := kreq.(*kmsg.DescribeConfigsRequest)
				resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
				for _, r := range req.Resources {
					rr := kmsg.NewDescribeConfigsResponseResource()
					rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
					rr.ErrorCode = kerr.UnknownTopicOrPartition.Code
					resp.Resources = append(resp.Resources, rr)
				}
				return resp, nil, true
			})
			ctx := context.Background()
			if tc.wantError {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Second)
				defer cancel()
			}
			drift, err := cat.Verify(ctx, adm)
			if tc.wantError {
				if err == nil || !errors.Is(err, kerr.UnknownTopicOrPartition) || !strings.Contains(err.Error(), cat.Name(topics.Seen)) {
					t.Fatalf("Verify = %v, %v; want UNKNOWN_TOPIC_OR_PARTITION naming %s", drift, err, cat.Name(topics.Seen))
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if len(drift) != 0 {
				t.Fatalf("drift = %v, want none", drift)
			}
			if n := asked.Load(); n != 4 {
				t.Fatalf("DescribeConfigs asked %d times, want 4 (three unknown, then known)", n)
			}
		})
	}
}
