package route

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/reply"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

func TestGroupRecipientsReadBackAndUsersAreNotGroups(t *testing.T) {
	for _, g := range []Group{{Kind: GroupAll}, {Kind: GroupTag, Name: "vip"}, {Kind: GroupSegment, Name: "beta testers"}, {Kind: GroupTag, Name: "a:b"}} {
		t.Run("the group "+GroupRecipient(g)+" reads back as itself", func(t *testing.T) {
			if got, ok := ParseGroup(GroupRecipient(g)); !ok || got != g {
				t.Fatalf("ParseGroup(%q) = %+v, %v", GroupRecipient(g), got, ok)
			}
		})
	}
	for _, user := range []string{"u1", "@alice", "@allison", "all", "tag:vip", "@segment", "@tag:", "@segment:"} {
		t.Run("the user id "+user+" is not a group", func(t *testing.T) {
			if g, ok := ParseGroup(user); ok {
				t.Fatalf("ParseGroup(%q) = %+v", user, g)
			}
		})
	}
	for _, id := range []string{"@all", "@tag:x", "@segment:y", "@tag:", "@segment:"} {
		t.Run("the id "+id+" is reserved", func(t *testing.T) {
			if !IsGroupRecipient(id) {
				t.Fatalf("IsGroupRecipient(%q) = false", id)
			}
		})
	}
}

func groupNote(recipient string) schemas.Accepted {
	id := identity.DedupeID("acme", "news", recipient, "k")
	return schemas.Accepted{NotificationID: id, OccurrenceID: identity.OccurrenceID(id, base.UnixMilli()), RequestID: "r1",
		Tenant: "acme", Type: "news", Recipient: recipient, Title: "t", Body: "b", DedupeKey: "k", AcceptedAt: base.UnixMilli()}
}

func TestAGroupNotificationFansOutToOneNotificationPerMember(t *testing.T) {
	src := Source{Topic: "accepted", Partition: 1, Offset: 7}
	seg := Group{Kind: GroupSegment, Name: "beta"}
	n := groupNote(GroupRecipient(seg))
	cases := []struct {
		name    string
		members []string
		known   bool
		max     int
		outcome string
		users   []string
	}{
		{"members are reached once each, in order, and nested groups are not", []string{"s2", "s1", "s2", "@all", ""}, true, 0, schemas.DecisionRouted, []string{"s1", "s2"}},
		{"a segment that does not exist reaches no one", nil, false, 0, schemas.DecisionNoTarget, nil},
		{"an empty group reaches no one", []string{}, true, 0, schemas.DecisionNoTarget, nil},
		{"a group larger than the fan-out limit is rejected whole", []string{"a", "b", "c"}, true, 2, schemas.DecisionRejected, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			members := slices.Clone(c.members)
			slices.Sort(members)
			res := Policy{MaxFanOut: c.max}.FanOut(n, seg, base.UnixMilli(), src, members, c.known)
			if len(res.Decisions) != 1 || res.Decisions[0].Outcome != c.outcome || res.Decisions[0].NotificationID != n.NotificationID {
				t.Fatalf("decisions %+v, want one %s about the group notification", res.Decisions, c.outcome)
			}
			if len(res.State) != 0 || len(res.Commands) != 0 {
				t.Fatalf("the fan-out changed state or sent commands itself: %+v", res)
			}
			var users []string
			for _, a := range res.Accepted {
				users = append(users, a.Recipient)
				if want := FanOutID("acme", "news", a.Recipient, n.NotificationID); a.NotificationID != want {
					t.Fatalf("member %s has id %s, want %s", a.Recipient, a.NotificationID, want)
				}
				if a.OccurrenceID != identity.OccurrenceID(a.NotificationID, n.AcceptedAt) || a.RequestID != n.RequestID || a.Title != n.Title {
					t.Fatalf("member notification %+v does not carry the group's request, content and acceptance", a)
				}
				if !strings.Contains(res.Decisions[0].Detail, a.Recipient+" ("+a.NotificationID+")") {
					t.Fatalf("detail %q does not name member %s and its id", res.Decisions[0].Detail, a.Recipient)
				}
			}
			if !slices.Equal(users, c.users) {
				t.Fatalf("members reached %v, want %v", users, c.users)
			}
		})
	}
	t.Run("the same group notification fans out to the same ids", func(t *testing.T) {
		a := Policy{}.FanOut(n, seg, base.UnixMilli(), src, []string{"s1"}, true)
		b := Policy{}.FanOut(n, seg, base.UnixMilli()+5, src, []string{"s1"}, true)
		if a.Accepted[0].NotificationID != b.Accepted[0].NotificationID || a.Accepted[0].OccurrenceID != b.Accepted[0].OccurrenceID {
			t.Fatal("a replay of the fan-out derived other ids")
		}
	})
}

// groupDirectory is a StaticDirectory that also resolves groups.
type groupDirectory struct {
	StaticDirectory
	segments map[string][]string // name → members
	syncs    int
}

func (g *groupDirectory) Members(tenant string, gr Group) ([]string, bool) {
	switch gr.Kind {
	case GroupSegment:
		m, ok := g.segments[gr.Name]
		return m, ok
	default:
		var users []string
		for _, who := range g.StaticDirectory {
			for _, d := range who.Devices {
				if d.Tenant == tenant && d.Enabled && (gr.Kind == GroupAll || slices.Contains(d.Tags, gr.Name)) {
					users = append(users, d.Recipient)
					break
				}
			}
		}
		slices.Sort(users)
		return users, true
	}
}

func (g *groupDirectory) SyncGroups(context.Context) error { g.syncs++; return nil }

func TestTheTaskWritesAGroupsMembersBackToAcceptedInTheGroupsTransaction(t *testing.T) {
	tp := testTopics
	tp.Replies, tp.ReplyPartitions = "replies", 4
	phone := func(user string, tags ...string) schemas.Device {
		d := dev("phone", "ios")
		d.Recipient, d.Tags = user, tags
		return d
	}
	dir := &groupDirectory{StaticDirectory: StaticDirectory{
		schemas.RecipientKey("acme", "t1"): {Devices: []schemas.Device{phone("t1", "vip")}},
		schemas.RecipientKey("acme", "t2"): {Devices: []schemas.Device{phone("t2")}},
	}, segments: map[string][]string{"beta": {"t1", "t2"}}}
	task := NewTask(Policy{}, tp, harnessPartition, dir, nil)
	process := func(n schemas.Accepted, hs []kgo.RecordHeader) *stage.Out {
		t.Helper()
		rec := acceptedRecord(t, n, 0, 0)
		rec.Headers = hs
		var out stage.Out
		if err := task.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
		return &out
	}
	t.Run("a tag notification is decided routed and its members are written keyed by recipient", func(t *testing.T) {
		out := process(groupNote("@tag:vip"), reply.AppendHeader(nil, 2))
		var members []schemas.Accepted
		for _, r := range out.Records() {
			if r.Topic != "accepted" {
				continue
			}
			var a schemas.Accepted
			if err := schemas.Decode(r.Value, &a); err != nil {
				t.Fatal(err)
			}
			if string(r.Key) != schemas.RecipientKey("acme", a.Recipient) {
				t.Fatalf("member %s keyed %s, want its recipient key", a.Recipient, r.Key)
			}
			members = append(members, a)
		}
		if len(members) != 1 || members[0].Recipient != "t1" || count(out, "decisions") != 1 || count(out, "replies") != 1 {
			t.Fatalf("members %+v, %d decisions, %d replies; want t1 alone, one decision and its reply", members, count(out, "decisions"), count(out, "replies"))
		}
		task.Commit()
		if dir.syncs != 1 {
			t.Fatalf("the directory was synced on every partition %d times, want once", dir.syncs)
		}
		// The member's notification is decided like any other.
		rec := acceptedRecord(t, members[0], 1, 0)
		var next stage.Out
		if err := task.Process(rec, &next); err != nil {
			t.Fatal(err)
		}
		task.Commit()
		if count(&next, "d.apns") != 1 || count(&next, "accepted") != 0 {
			t.Fatalf("the member's notification sent %d apns commands and %d more notifications, want 1 and none", count(&next, "d.apns"), count(&next, "accepted"))
		}
	})
	t.Run("an aborted fan-out is written again whole when the group is read again", func(t *testing.T) {
		n := groupNote("@segment:beta")
		if out := process(n, nil); count(out, "accepted") != 2 {
			t.Fatalf("%d members written, want 2", count(out, "accepted"))
		}
		task.Abort()
		out := process(n, nil)
		task.Commit()
		if count(out, "accepted") != 2 || count(out, "decisions") != 1 {
			t.Fatalf("after the abort: %d members, %d decisions; want 2 and 1", count(out, "accepted"), count(out, "decisions"))
		}
	})
	t.Run("an explain of a group answers its members and writes nothing else", func(t *testing.T) {
		out := process(groupNote("@all"), append(reply.AppendHeader(nil, 1), reply.ExplainRouteHeader()))
		task.Commit()
		recs := out.Records()
		if len(recs) != 1 || recs[0].Topic != "replies" {
			t.Fatalf("the explain emitted %d records, want its reply alone", len(recs))
		}
		var d schemas.Decision
		if err := schemas.Decode(recs[0].Value, &d); err != nil {
			t.Fatal(err)
		}
		if d.Outcome != schemas.DecisionRouted || !strings.Contains(d.Detail, "fanned out to 2 recipients: t1") {
			t.Fatalf("explain answered %s %q", d.Outcome, d.Detail)
		}
	})
	t.Run("a directory that resolves no groups reaches no one", func(t *testing.T) {
		plain := NewTask(Policy{}, tp, harnessPartition, dir.StaticDirectory, nil)
		rec := acceptedRecord(t, groupNote("@all"), 0, time.Second)
		var out stage.Out
		if err := plain.Process(rec, &out); err != nil {
			t.Fatal(err)
		}
		if count(&out, "accepted") != 0 || count(&out, "decisions") != 1 {
			t.Fatalf("%d members, %d decisions", count(&out, "accepted"), count(&out, "decisions"))
		}
	})
}

func TestTheTableResolvesGroupsFromDevicesAndSegments(t *testing.T) {
	tb := &Table{devicesT: "devices", prefsT: "preferences", segmentsT: "segments",
		devices: map[string]map[string]schemas.Device{}, prefs: map[string]schemas.Preferences{}, segs: map[string]schemas.Segment{}}
	put := func(topic, key string, v schemas.Record) {
		t.Helper()
		r := &kgo.Record{Topic: topic, Key: []byte(key)}
		if v != nil {
			b, err := schemas.Encode(v)
			if err != nil {
				t.Fatal(err)
			}
			r.Value = b
		}
		tb.apply(r)
	}
	device := func(tenant, user, id string, enabled bool, retired string, tags ...string) {
		put("devices", schemas.DeviceKey(tenant, user, id), &schemas.Device{Tenant: tenant, Recipient: user, DeviceID: id, Platform: "ios", Token: "x",
			Enabled: enabled, RetiredReason: retired, Tags: tags})
	}
	device("acme", "t1", "a", true, "", "vip", "beta")
	device("acme", "t1", "b", true, "", "vip")
	device("acme", "t2", "a", true, "", "vip")
	device("acme", "t3", "a", false, "", "vip")
	device("acme", "t4", "a", true, "unregistered", "vip")
	device("other", "t9", "a", true, "", "vip")
	device("acme/x", "t8", "a", true, "", "vip") // a tenant whose escaped name extends acme's
	device("acme", "t5", "a", true, "", "vip")
	put("devices", schemas.DeviceKey("acme", "t5", "a"), nil) // deleted: t5 has no device left
	device("acme", "t6", "old", false, "")
	device("acme", "t6", "new", true, "") // one enabled device is enough for all
	put("segments", schemas.RecipientKey("acme", "beta"), &schemas.Segment{Tenant: "acme", Name: "beta", Members: []string{"s2", "s1"}})
	put("segments", schemas.RecipientKey("acme", "gone"), &schemas.Segment{Tenant: "acme", Name: "gone", Members: []string{"x"}})
	put("segments", schemas.RecipientKey("acme", "gone"), nil)
	cases := []struct {
		name  string
		g     Group
		users []string
		known bool
	}{
		{"all is every user of the tenant with an enabled, unretired device", Group{Kind: GroupAll}, []string{"t1", "t2", "t6"}, true},
		{"a tag counts only the devices left after a delete", Group{Kind: GroupTag, Name: "vip"}, []string{"t1", "t2"}, true},
		{"a tag is those of them with such a device carrying it", Group{Kind: GroupTag, Name: "beta"}, []string{"t1"}, true},
		{"a segment is its members", Group{Kind: GroupSegment, Name: "beta"}, []string{"s1", "s2"}, true},
		{"a deleted segment is unknown", Group{Kind: GroupSegment, Name: "gone"}, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			users, known := tb.Members("acme", c.g)
			if !slices.Equal(users, c.users) || known != c.known {
				t.Fatalf("Members = %v, %v; want %v, %v", users, known, c.users, c.known)
			}
		})
	}
}
