package api

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
)

func TestTheReplicaFindsEveryOwnerOfADeviceIDWithinATenant(t *testing.T) {
	r := newReplica("seen", "devices", "prefs", "segments")
	put := func(tenant, user, id string) {
		d := schemas.Device{Tenant: tenant, Recipient: user, DeviceID: id, Platform: "android", Token: "t", Enabled: true}
		r.putDevice(schemas.DeviceKey(tenant, user, id), &d)
	}
	put("ta", "u_zed", "phone-1")
	put("ta", "u_abc", "phone-1")
	put("ta", "u_abc", "tablet")
	put("ta/x", "u_x", "phone-1") // a tenant whose escaped name extends ta's
	put("tb", "u_b", "phone-1")
	put("ta", "u_gone", "phone-1")
	r.putDevice(schemas.DeviceKey("ta", "u_gone", "phone-1"), nil)
	for _, tc := range []struct {
		name, tenant, id string
		want             []string
	}{
		{"a device id two users registered has both owners, sorted", "ta", "phone-1", []string{"u_abc", "u_zed"}},
		{"a device id one user registered has that owner", "ta", "tablet", []string{"u_abc"}},
		{"another tenant's devices are not owners", "tb", "phone-1", []string{"u_b"}},
		{"an unknown device id has no owner", "ta", "watch", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.deviceOwners(tc.tenant, tc.id); !slices.Equal(got, tc.want) {
				t.Fatalf("deviceOwners(%q, %q) = %v, want %v", tc.tenant, tc.id, got, tc.want)
			}
		})
	}
}

func TestTheReplicaAppliesSegmentRecordsAndTombstones(t *testing.T) {
	r := newReplica("seen", "devices", "prefs", "segments")
	key := schemas.RecipientKey("ta", "beta")
	r.putSegment(key, &schemas.Segment{Tenant: "ta", Name: "beta", Members: []string{"u1", "u2"}})
	if sg, ok := r.segment("ta", "beta"); !ok || !slices.Equal(sg.Members, []string{"u1", "u2"}) {
		t.Fatalf("segment %+v (%v), want members u1, u2", sg, ok)
	}
	if _, ok := r.segment("tb", "beta"); ok {
		t.Fatal("another tenant reads the segment")
	}
	r.putSegment(key, nil)
	if _, ok := r.segment("ta", "beta"); ok {
		t.Fatal("a tombstone left the segment in place")
	}
}

func TestTheReplicaAppliesEachTopicsRecords(t *testing.T) {
	r := newReplica("seen", "devices", "prefs", "segments")
	r.feedT, r.webhooksT = "feed", "webhooks"
	log := slog.New(slog.DiscardHandler)
	cases := []struct {
		name, topic, key string
		v                schemas.Record
		has              func() bool
	}{
		{"a seen entry", "seen", schemas.SeenKey(schemas.SeenDedupe, "0123456789abcdef0123456789abcdef"), &schemas.SeenEntry{
			Kind: schemas.SeenDedupe, Scope: "0123456789abcdef0123456789abcdef", NotificationID: "fedcba9876543210fedcba9876543210",
			RequestID: "00112233445566778899aabbccddeeff", Outcome: schemas.DecisionAccepted, FirstAt: 1, ExpiresAt: 2},
			func() bool { return r.seen.Len() == 1 }},
		{"a device", "devices", schemas.DeviceKey("ta", "u1", "d1"), &schemas.Device{Tenant: "ta", Recipient: "u1", DeviceID: "d1"},
			func() bool { _, ok := r.device("ta", "u1", "d1"); return ok }},
		{"preferences", "prefs", schemas.RecipientKey("ta", "u1"), &schemas.Preferences{Tenant: "ta", Recipient: "u1"},
			func() bool { _, ok := r.preferences("ta", "u1"); return ok }},
		{"a segment", "segments", schemas.RecipientKey("ta", "s1"), &schemas.Segment{Tenant: "ta", Name: "s1"},
			func() bool { _, ok := r.segment("ta", "s1"); return ok }},
		{"a webhook", "webhooks", schemas.RecipientKey("ta", "w1"), &schemas.Webhook{Tenant: "ta", ID: "w1"},
			func() bool { _, ok := r.webhook("ta", "w1"); return ok }},
		{"a feed item", "feed", schemas.FeedKey("ta", "u1", "n1"), &schemas.FeedItem{Tenant: "ta", Recipient: "u1", NotificationID: "n1"},
			func() bool { return len(r.feedOf("ta", "u1", 0)) == 1 }},
	}
	for _, c := range cases {
		t.Run(c.name+" is read, kept past an undecodable value and deleted by a tombstone", func(t *testing.T) {
			b, err := schemas.Encode(c.v)
			if err != nil {
				t.Fatal(err)
			}
			steps := []struct {
				value []byte
				want  bool
			}{{b, true}, {[]byte("not json"), true}, {nil, false}}
			for i, s := range steps {
				r.apply(&kgo.Record{Topic: c.topic, Key: []byte(c.key), Value: s.value}, log)
				if got := c.has(); got != s.want {
					t.Fatalf("after step %d: held = %v, want %v", i, got, s.want)
				}
			}
		})
	}
}
