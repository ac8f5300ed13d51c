package sdk_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/topics"
)

var quiet = slog.New(slog.DiscardHandler)

// runDedupe runs the dedupe stage in-process on cat's topics until the
// test ends.
func runDedupe(t *testing.T, brokers []string, cat *topics.Catalog) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := dedupe.Run(ctx, dedupe.Options{Instance: stage.Instance{Brokers: brokers, Group: "g-" + cat.Name(""), InstanceID: "i1", Logger: quiet}, Catalog: cat}); err != nil {
			t.Errorf("dedupe stage: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// decisions waits until the committed dedupe decisions about the given
// notifications number n, and returns their outcomes by id.
func decisions(t *testing.T, brokers []string, cat *topics.Catalog, ids []string, n int) map[string][]string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		out := map[string][]string{}
		total := 0
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions)) {
			var d schemas.Decision
			if err := schemas.Decode(r.Value, &d); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(ids, d.NotificationID) {
				out[d.NotificationID] = append(out[d.NotificationID], d.Outcome)
				total++
			}
		}
		if total >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d decisions, want %d", total, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestTheClientRetriesRateLimitsAndLostAnswersIntoOneNotification(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	runDedupe(t, brokers, cat)
	srv, err := api.New(api.Config{Brokers: brokers, Catalog: cat, Keys: api.DevKeys(), IdempotencyWait: 90 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	// Attempt 1 is refused with 429 and Retry-After; attempt 2 is served
	// but its answer is lost behind a 502; attempt 3 goes through.
	var o observed
	hs := httptest.NewServer(o.wrap(func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			srv.ServeHTTP(httptest.NewRecorder(), r)
			w.WriteHeader(http.StatusBadGateway)
		default:
			srv.ServeHTTP(w, r)
		}
	}))
	defer hs.Close()
	c := sdk.NewClient(hs.URL, api.DevAPIKey)
	c.MinBackoff = 10 * time.Millisecond
	res, err := c.Send(context.Background(), sdk.Notification{Type: "welcome", Recipients: []string{"u1"}, Title: "Hi", Body: "Welcome"})
	if err != nil {
		t.Fatal(err)
	}
	if o.attempts != 3 || len(o.keys) != 1 {
		t.Fatalf("%d attempts with %d idempotency keys, want 3 with one", o.attempts, len(o.keys))
	}
	if !res.Replayed || res.Notifications[0].Status != schemas.DecisionAccepted {
		t.Fatalf("answer %+v, want the replayed accepted original", res)
	}
	id := res.Notifications[0].ID
	got := decisions(t, brokers, cat, []string{id}, 2)[id]
	slices.Sort(got)
	if !slices.Equal(got, []string{"accepted", "idempotent_replay"}) {
		t.Fatalf("decisions %v, want one accepted and one replay", got)
	}
}

func TestTheProducerWritesRequestsTheStageDecides(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 3)
	runDedupe(t, brokers, cat)
	for _, tc := range []struct {
		name, txnID string
		format      schemas.Format
	}{
		{"the idempotent producer", "", ""},
		{"the transactional producer", "sdk-test-" + cat.Name(""), schemas.FormatJSON},
	} {
		t.Run(tc.name+" writes one "+tc.format.RequestSchema()+" request per recipient, keyed by notification id", func(t *testing.T) {
			p, err := sdk.NewProducer(sdk.ProducerConfig{Brokers: brokers, Catalog: cat, Tenant: "acme", Name: "billing", TransactionalID: tc.txnID, Format: tc.format})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			n := sdk.Notification{Type: "invoice.paid", Recipients: []string{"u1", "u2"}, Title: "Paid", Body: "Thanks", DedupeKey: "inv-" + tc.name}
			first, err := p.Send(context.Background(), n)
			if err != nil {
				t.Fatal(err)
			}
			again, err := p.Send(context.Background(), n)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for i, r := range first {
				want, _, _ := sdk.DeriveID("acme", n.Type, r.Recipient, nil, n.DedupeKey, "")
				if r.NotificationID != want || again[i].NotificationID != want || r.Source != "sdk" || r.Producer != "billing" {
					t.Fatalf("request %+v, want id %s", r, want)
				}
				ids = append(ids, want)
			}
			got := decisions(t, brokers, cat, ids, 4)
			for _, id := range ids {
				o := got[id]
				slices.Sort(o)
				if !slices.Equal(o, []string{"accepted", "duplicate"}) {
					t.Fatalf("decisions of %s: %v, want accepted then duplicate", id, o)
				}
			}
			for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Requests)) {
				var rq schemas.Request
				if err := schemas.Decode(r.Value, &rq); err != nil || string(r.Key) != rq.NotificationID {
					t.Fatalf("record key %s, request %+v (%v)", r.Key, rq, err)
				}
				if want := topics.PartitionOf(rq.NotificationID, 3); r.Partition != want {
					t.Fatalf("request %s in partition %d, want %d", rq.NotificationID, r.Partition, want)
				}
				if !slices.Contains(ids, rq.NotificationID) {
					continue // the other case's
				}
				if rq.Schema != tc.format.RequestSchema() || string(r.Headers[0].Value) != rq.Schema {
					t.Fatalf("a request read as %s, header %s, want %s", rq.Schema, r.Headers[0].Value, tc.format.RequestSchema())
				}
			}
		})
	}
}

func TestTheClientSetsSegmentsTagsDevicesAndSendsToThem(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 2)
	// No dedupe stage: the sends answer pending after a short wait.
	srv, err := api.New(api.Config{Brokers: brokers, Catalog: cat, Keys: api.DevKeys(), IdempotencyWait: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c := sdk.NewClient(hs.URL, api.DevAPIKey)
	c.MinBackoff = 50 * time.Millisecond
	c.MaxAttempts = 200 // 503 until the replica is ready
	ctx := context.Background()
	recipients := func(res *sdk.SendResult) []string {
		var out []string
		for _, n := range res.Notifications {
			out = append(out, n.Recipient)
		}
		slices.Sort(out)
		return out
	}
	send := func(target sdk.Target) (*sdk.SendResult, error) {
		return c.Send(ctx, sdk.Notification{Type: "news", Target: &target, Title: "t", Body: "b"})
	}

	t.Run("a webhook endpoint set with the client is listed, set again unchanged (its secret shown only when created), and deleted", func(t *testing.T) {
		w, err := c.SetWebhook(ctx, "hooks", sdk.WebhookUpdate{URL: "https://hooks.example.com/h", Events: []string{"delivery.failed"}})
		if err != nil || !strings.HasPrefix(w.Secret, "whsec_") || !w.Enabled {
			t.Fatalf("SetWebhook: %+v, %v", w, err)
		}
		again, err := c.SetWebhook(ctx, "hooks", sdk.WebhookUpdate{URL: "https://hooks.example.com/h", Events: []string{"delivery.failed"}})
		if err != nil || again.Secret != "" || again.UpdatedAt != w.UpdatedAt || again.URL != w.URL {
			t.Fatalf("SetWebhook again: %+v, %v; want %+v without its secret", again, err, w)
		}
		if l, err := c.Webhooks(ctx); err != nil || len(l) != 1 || l[0].ID != "hooks" || l[0].Secret != "" {
			t.Fatalf("Webhooks: %+v, %v", l, err)
		}
		if err := c.DeleteWebhook(ctx, "hooks"); err != nil {
			t.Fatal(err)
		}
		if l, err := c.Webhooks(ctx); err != nil || len(l) != 0 {
			t.Fatalf("Webhooks after delete: %+v, %v", l, err)
		}
	})
	t.Run("a segment set with the client is a target", func(t *testing.T) {
		sg, err := c.SetSegment(ctx, "early", []string{"u2", "u1"})
		if err != nil || sg.Name != "early" || !slices.Equal(sg.Members, []string{"u2", "u1"}) {
			t.Fatalf("SetSegment: %+v, %v", sg, err)
		}
		// One notification addressed to the segment: the route stage fans
		// it out to the members (processors/route group.go).
		res, err := send(sdk.Target{Kind: sdk.TargetSegment, Segment: "early"})
		if err != nil || !slices.Equal(recipients(res), []string{"@segment:early"}) {
			t.Fatalf("send: %+v, %v", res, err)
		}
	})
	t.Run("a device registered with tags is reached by its tag", func(t *testing.T) {
		d, err := c.RegisterDevice(ctx, "u3", "phone", sdk.DeviceRegistration{Platform: sdk.PlatformIOS, Token: "tok", Tags: []string{"vip"}})
		if err != nil || !slices.Equal(d.Tags, []string{"vip"}) {
			t.Fatalf("RegisterDevice: %+v, %v", d, err)
		}
		res, err := send(sdk.Target{Kind: sdk.TargetTag, Tag: "vip"})
		if err != nil || !slices.Equal(recipients(res), []string{"@tag:vip"}) {
			t.Fatalf("send: %+v, %v", res, err)
		}
	})
	t.Run("a deleted segment is gone", func(t *testing.T) {
		if err := c.DeleteSegment(ctx, "early"); err != nil {
			t.Fatal(err)
		}
		// A send to it is still one accepted notification: the route stage
		// decides it reaches no one (no_target).
		if res, err := send(sdk.Target{Kind: sdk.TargetSegment, Segment: "early"}); err != nil || !slices.Equal(recipients(res), []string{"@segment:early"}) {
			t.Fatalf("send: %+v, %v", res, err)
		}
	})
}
