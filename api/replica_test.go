package api

import (
	"slices"
	"testing"

	"github.com/heraldhq/herald/schemas"
)

func TestTheReplicaResolvesTagAndAllTargetsWithinATenant(t *testing.T) {
	r := newReplica("seen", "devices", "prefs", "segments")
	put := func(tenant, user, id string, enabled bool, tags ...string) {
		d := schemas.Device{Tenant: tenant, Recipient: user, DeviceID: id, Platform: "ios", Token: "t", Enabled: enabled, Tags: tags}
		r.putDevice(schemas.DeviceKey(tenant, user, id), &d)
	}
	put("ta", "u1", "phone", true, "vip", "beta")
	put("ta", "u2", "phone", true, "vip")
	put("ta", "u2", "tablet", true, "vip") // two devices, one user
	put("ta", "u3", "phone", false, "vip") // disabled
	put("ta", "u4", "old", false)
	put("ta", "u4", "new", true)            // one enabled device is enough for all
	put("ta/x", "u9", "phone", true, "vip") // a tenant whose escaped name extends ta's
	put("tb", "u5", "phone", true, "vip")
	r.putDevice(schemas.DeviceKey("ta", "u1", "phone"), nil)
	put("ta", "u1", "watch", true, "beta") // u1 is still beta, no longer vip

	cases := []struct {
		name, tenant, tag string
		want              []string
	}{
		{"all is every user of the tenant with an enabled device", "ta", "", []string{"u1", "u2", "u4"}},
		{"a tag is every user with an enabled device carrying it", "ta", "vip", []string{"u2"}},
		{"a tag counts only the devices left after a delete", "ta", "beta", []string{"u1"}},
		{"a tag nobody carries reaches no one", "ta", "none", nil},
		{"another tenant sees only its own users", "tb", "", []string{"u5"}},
		{"a tenant with no devices reaches no one", "tc", "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.usersWithDevices(tc.tenant, tc.tag); !slices.Equal(got, tc.want) {
				t.Fatalf("usersWithDevices(%q, %q) = %v, want %v", tc.tenant, tc.tag, got, tc.want)
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
