package route

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// A fast test of the route stage as a whole on kfake (the real broker's
// runs are in kafka_test.go): its wiring, the read of devices and
// preferences before the first notification, a record that does not
// decode, and a replay of what it decided.
func TestTheRouteStageOnKfakeDecidesEveryNotificationAndItsReplayAgrees(t *testing.T) {
	c := testenv.Kfake(t)
	brokers := c.ListenAddrs()
	opts := append(embedded.ClientOpts(), kgo.FetchMaxWait(100*time.Millisecond))
	cat := testenv.Catalog(t, brokers, 2)
	now := time.Now()
	d := dev("ios-a", "ios")
	n := note("invoice.paid", "k1")
	produce(t, brokers, cat, []*kgo.Record{
		encoded(t, cat.Name(topics.Devices), schemas.DeviceKey("acme", "u1", d.DeviceID), &d, now.Add(-time.Minute)),
		encoded(t, cat.Name(topics.Accepted), schemas.RecipientKey("acme", "u1"), &n, now),
		{Topic: cat.Name(topics.Accepted), Key: []byte(schemas.RecipientKey("acme", "u1")), Value: []byte("{not json"), Timestamp: now},
	})

	s, err := New(Options{
		Instance: stage.Instance{Brokers: brokers, InstanceID: "r1" + embedded.TransactionalSuffix(), ResetOffsets: embedded.ResetOffsets, BatchInterval: 10 * time.Millisecond, ClientOpts: opts, Metrics: metrics.NewRegistry()},
		Catalog:  cat,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Ready() {
		t.Fatal("ready before it ran")
	}
	ctx, cancel := context.WithCancel(testenv.Guarded(t))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var decisions []schemas.Decision
	for deadline := time.Now().Add(20 * time.Second); len(decisions) < 2; time.Sleep(50 * time.Millisecond) { // a guard
		if time.Now().After(deadline) {
			t.Fatalf("decisions %+v, want two", decisions)
		}
		decisions = decisions[:0]
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions), opts...) {
			var dd schemas.Decision
			if err := schemas.Decode(r.Value, &dd); err != nil {
				t.Fatal(err)
			}
			decisions = append(decisions, dd)
		}
	}
	if !s.Ready() {
		t.Fatal("not ready while deciding")
	}
	cancel()
	if err := testenv.Await(t, done, "the cancelled route stage"); err != nil {
		t.Fatalf("route stage: %v", err)
	}
	outcomes := map[string]int{}
	for _, dd := range decisions {
		outcomes[dd.Outcome]++
		if dd.Outcome == schemas.DecisionRejected && (!strings.HasPrefix(dd.DecisionID, "route/"+cat.Name(topics.Accepted)+"/") || dd.Detail == "") {
			t.Fatalf("the rejection %+v does not name the record's position and the cause", dd)
		}
	}
	if outcomes[schemas.DecisionRouted] != 1 || outcomes[schemas.DecisionRejected] != 1 {
		t.Fatalf("outcomes %v, want one routed (the device was read first) and one rejected", outcomes)
	}

	t.Run("a replay with the live policy finds no difference", func(t *testing.T) {
		rep, err := Replay(testenv.Guarded(t), brokers, cat, Policy{}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Notifications != 2 || rep.Compared != 2 || len(rep.Differences) != 0 || rep.Pending != 0 {
			t.Fatalf("replay %+v, want 2 notifications compared, no difference", rep)
		}
	})
	t.Run("a replay with another policy shows the difference", func(t *testing.T) {
		rep, err := Replay(testenv.Guarded(t), brokers, cat, Policy{Digests: map[string]Digest{"invoice.paid": {WindowMs: 3600_000}}}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Compared != 2 || len(rep.Differences) != 1 || !strings.Contains(rep.Differences[0], ": live "+schemas.DecisionRouted+" (), replay "+schemas.DecisionDigested+" (digest invoice.paid until ") {
			t.Fatalf("replay %+v, want the routed decision shown as a difference", rep)
		}
	})
	t.Run("a live decision the replay does not make is a difference", func(t *testing.T) {
		ghost := schemas.Decision{DecisionID: "route/ghost/0/0", Stage: "route", Outcome: schemas.DecisionOptedOut, Channel: "fcm", Tenant: "acme",
			Type: "t", Recipient: "u1", NotificationID: n.NotificationID, At: now.UnixMilli()}
		produce(t, brokers, cat, []*kgo.Record{encoded(t, cat.Name(topics.Decisions), "ghost", &ghost, now)})
		rep, err := Replay(testenv.Guarded(t), brokers, cat, Policy{}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Differences) != 1 || rep.Differences[0] != "route/ghost/0/0: the live stage decided opted_out:fcm, replay nothing" {
			t.Fatalf("differences %q, want the live decision replay did not make, with its channel", rep.Differences)
		}
	})
	t.Run("a device change after the last notification is read and changes nothing decided", func(t *testing.T) {
		later := dev("android-b", "android")
		produce(t, brokers, cat, []*kgo.Record{
			encoded(t, cat.Name(topics.Devices), schemas.DeviceKey("acme", "u1", later.DeviceID), &later, now.Add(time.Hour)),
		})
		rep, err := Replay(testenv.Guarded(t), brokers, cat, Policy{}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Notifications != 2 || rep.Compared != 2 || len(rep.Differences) != 1 || rep.Pending != 0 {
			t.Fatalf("replay %+v, want the two notifications decided as before (the ghost the one difference)", rep)
		}
	})
}

// The route stage on kfake resolves a group notification over every
// partition's devices and segments (here a segment on one partition,
// members' devices on others), writes its members' notifications back to
// herald.accepted, decides each, and a replay compares the members'
// decisions and leaves the group's own (Groups).
func TestTheRouteStageOnKfakeFansAGroupOutAndItsReplayComparesTheMembers(t *testing.T) {
	c := testenv.Kfake(t)
	brokers := c.ListenAddrs()
	opts := append(embedded.ClientOpts(), kgo.FetchMaxWait(100*time.Millisecond))
	cat := testenv.Catalog(t, brokers, 3)
	now := time.Now()
	var recs []*kgo.Record
	for _, u := range []string{"m1", "m2", "m3"} {
		d := dev("ios-a", "ios")
		d.Recipient = u
		recs = append(recs, encoded(t, cat.Name(topics.Devices), schemas.DeviceKey("acme", u, d.DeviceID), &d, now.Add(-time.Minute)))
	}
	sg := schemas.Segment{Schema: schemas.SegmentV1, Tenant: "acme", Name: "beta", Members: []string{"m1", "m2", "m3"}}
	recs = append(recs, encoded(t, cat.Name(topics.Segments), schemas.RecipientKey("acme", "beta"), &sg, now.Add(-time.Minute)))
	g := groupNote(GroupRecipient(Group{Kind: GroupSegment, Name: "beta"}))
	recs = append(recs, encoded(t, cat.Name(topics.Accepted), schemas.RecipientKey("acme", g.Recipient), &g, now))
	produce(t, brokers, cat, recs)

	s, err := New(Options{
		Instance: stage.Instance{Brokers: brokers, InstanceID: "r1" + embedded.TransactionalSuffix(), ResetOffsets: embedded.ResetOffsets, BatchInterval: 10 * time.Millisecond, ClientOpts: opts, Metrics: metrics.NewRegistry()},
		Catalog:  cat,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testenv.Guarded(t))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var decisions []schemas.Decision
	for deadline := time.Now().Add(20 * time.Second); len(decisions) < 4; time.Sleep(50 * time.Millisecond) { // a guard
		if time.Now().After(deadline) {
			t.Fatalf("decisions %+v, want the group's and three members'", decisions)
		}
		decisions = decisions[:0]
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions), opts...) {
			var dd schemas.Decision
			if err := schemas.Decode(r.Value, &dd); err != nil {
				t.Fatal(err)
			}
			decisions = append(decisions, dd)
		}
	}
	cancel()
	if err := testenv.Await(t, done, "the cancelled route stage"); err != nil {
		t.Fatalf("route stage: %v", err)
	}
	members := map[string]string{}
	for _, d := range decisions {
		if d.NotificationID == g.NotificationID {
			if d.Outcome != schemas.DecisionRouted || !strings.HasPrefix(d.Detail, "fanned out to 3 recipients: m1 (") {
				t.Fatalf("the group's decision %s %q", d.Outcome, d.Detail)
			}
			continue
		}
		if _, dup := members[d.Recipient]; dup || d.NotificationID != FanOutID("acme", g.Type, d.Recipient, g.NotificationID) || len(d.Deliveries) != 2 {
			t.Fatalf("member decision %+v: a repeat, another id, or not to the phone and the feed", d)
		}
		members[d.Recipient] = d.Outcome
	}
	if len(members) != 3 || len(decisions) != 4 {
		t.Fatalf("members decided %v in %d decisions, want m1, m2 and m3 once each", members, len(decisions))
	}
	t.Run("a replay compares the members' decisions and leaves the group's", func(t *testing.T) {
		rep, err := Replay(testenv.Guarded(t), brokers, cat, Policy{}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Groups != 1 || rep.Notifications != 3 || rep.Compared != 3 || len(rep.Differences) != 0 {
			t.Fatalf("replay %+v, want one group left, three members compared, no difference", rep)
		}
	})
}
