package sinks

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/schemas"
)

// fakeDirectory is a devices directory holding devices (of every recipient),
// or failing to sync with err; it counts its syncs and notes how long the
// last one was given.
type fakeDirectory struct {
	devices []schemas.Device
	err     error
	syncs   int
	budget  time.Duration
}

func (f *fakeDirectory) SyncAll(ctx context.Context) error {
	f.syncs++
	if dl, ok := ctx.Deadline(); ok {
		f.budget = time.Until(dl)
	}
	return f.err
}

func (f *fakeDirectory) Recipient(string, string) route.Recipient {
	return route.Recipient{Devices: f.devices}
}

// device is cmd(id)'s device as herald.devices holds it.
func device(id string, enabled bool, token string) schemas.Device {
	c := cmd(id)
	return schemas.Device{Tenant: c.Tenant, Recipient: c.Recipient, DeviceID: c.DeviceID, Platform: "ios", Token: token, Enabled: enabled, Locale: "fr-FR"}
}

var unregistered = Result{Class: Permanent, Rule: "unregistered", Status: 410, Reason: "Unregistered", RetireDevice: true}

// TestATokenErrorRetiresADeviceOnlyWhileItHasTheTokenAndElseFailsTheDelivery:
// the device, as the directory has it, is retired when it still has the
// token (written once: an already retired one is not written again);
// otherwise (registered again with another token, removed, the directory
// unavailable or absent) nothing is retired and the delivery fails, with
// a dead letter saying why.
func TestATokenErrorRetiresADeviceOnlyWhileItHasTheTokenAndElseFailsTheDelivery(t *testing.T) {
	cases := []struct {
		name      string
		dir       *fakeDirectory // nil: the sink has no devices table
		outcome   string
		devices   []string
		deadWhy   string // in the dead letter's reason
		locale    string // of the retired device
		syncCalls int
	}{
		{name: "a device with the token is retired", dir: &fakeDirectory{devices: []schemas.Device{device("e", true, "tok-e"), device("d", true, "tok-d")}},
			outcome: schemas.OutcomeDeviceRetired, devices: []string{"acme/u1/dev-d:enabled=false/Unregistered"}, locale: "fr-FR", syncCalls: 1},
		{name: "a device already retired is not written again", dir: &fakeDirectory{devices: []schemas.Device{device("d", false, "tok-d")}},
			outcome: schemas.OutcomeDeviceRetired, syncCalls: 1},
		{name: "a device registered again with another token is not retired", dir: &fakeDirectory{devices: []schemas.Device{device("d", true, "tok-new")}},
			outcome: schemas.OutcomeFailed, deadWhy: "device not retired: it was registered again with another token since", syncCalls: 1},
		{name: "a removed device is not retired", dir: &fakeDirectory{devices: []schemas.Device{device("e", true, "tok-e")}},
			outcome: schemas.OutcomeFailed, deadWhy: "device not retired: it was removed", syncCalls: 1},
		{name: "nothing is retired while the devices are unavailable", dir: &fakeDirectory{err: errors.New("no broker")},
			outcome: schemas.OutcomeFailed, deadWhy: "device not retired: devices unavailable: no broker", syncCalls: 1},
		{name: "nothing is retired without a devices table", outcome: schemas.OutcomeFailed, deadWhy: "device not retired: no devices table"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Policy{})
			h.rt.devices = nil
			if tc.dir != nil {
				h.rt.devices = tc.dir
			}
			h.prov.results["d"] = []Result{unregistered}
			h.step(cmd("d"))
			tp := h.rt.topics
			check(t, "outcomes", h.on(tp.Outcomes), []string{"d:" + tc.outcome})
			check(t, "devices", h.on(tp.Devices), tc.devices)
			var why []string
			for _, r := range h.out {
				switch r.Topic {
				case tp.DeadLetters:
					for _, hd := range r.Headers {
						if hd.Key == "herald-reason" {
							why = append(why, string(hd.Value))
						}
					}
				case tp.Devices:
					var d schemas.Device
					must(t, schemas.Decode(r.Value, &d))
					if d.Locale != tc.locale || d.Token != "tok-d" {
						t.Errorf("retired device %+v lost fields of its registration", d)
					}
				}
			}
			if tc.deadWhy == "" && len(why) > 0 || tc.deadWhy != "" && (len(why) != 1 || !strings.HasSuffix(why[0], tc.deadWhy)) {
				t.Errorf("dead letters with reasons %q, want one ending %q", why, tc.deadWhy)
			}
			if tc.dir != nil && tc.dir.syncs != tc.syncCalls {
				t.Errorf("%d syncs, want %d", tc.dir.syncs, tc.syncCalls)
			}
		})
	}
}

// TestTheDevicesAreSyncedOncePerTransactionThatRetiresForUpToTenSeconds:
// a transaction with token errors syncs the directory once, however many
// there are, and the next one syncs again (read your writes); a sync is
// given ten seconds.
func TestTheDevicesAreSyncedOncePerTransactionThatRetiresForUpToTenSeconds(t *testing.T) {
	h := newHarness(t, Policy{})
	dir := &fakeDirectory{devices: []schemas.Device{device("d", true, "tok-d"), device("e", true, "tok-e"), device("f", true, "tok-f")}}
	h.rt.devices = dir
	for _, id := range []string{"d", "e", "f"} {
		h.prov.results[id] = []Result{unregistered}
	}
	h.step(cmd("d"), cmd("e"))
	if dir.syncs != 1 {
		t.Fatalf("%d syncs for one transaction with two token errors, want 1", dir.syncs)
	}
	h.step(cmd("f"))
	if dir.syncs != 2 {
		t.Fatalf("%d syncs after a second transaction with a token error, want 2", dir.syncs)
	}
	if dir.budget <= 9*time.Second || dir.budget > 10*time.Second {
		t.Fatalf("a sync given %v, want ten seconds", dir.budget)
	}
}

// retiring is a Retirer: its target is an endpoint, not a device.
type retiring struct{ *scripted }

func (retiring) Retire(cmd *schemas.DeliveryCommand, reason string, _ time.Time) []*kgo.Record {
	return []*kgo.Record{{Topic: "endpoints", Key: []byte(cmd.DeliveryID), Value: []byte(reason)}}
}

// TestARetirersTokenErrorWritesItsRecordsInPlaceOfADeviceUpdate: for a
// Retirer the runtime neither reads nor writes herald.devices: the
// Retirer's records commit with the device_retired outcome.
func TestARetirersTokenErrorWritesItsRecordsInPlaceOfADeviceUpdate(t *testing.T) {
	h := newHarness(t, Policy{})
	dir := &fakeDirectory{}
	h.rt.devices, h.rt.provider = dir, retiring{h.prov}
	h.prov.results["d"] = []Result{unregistered}
	h.step(cmd("d"))
	tp := h.rt.topics
	check(t, "outcomes", h.on(tp.Outcomes), []string{"d:device_retired"})
	check(t, "devices", h.on(tp.Devices), nil)
	check(t, "dead letters", h.on(tp.DeadLetters), nil)
	var endpoints []string
	for _, r := range h.out {
		if r.Topic == "endpoints" {
			endpoints = append(endpoints, string(r.Key)+":"+string(r.Value))
		}
	}
	check(t, "endpoints", endpoints, []string{"d:Unregistered"})
	if dir.syncs != 0 {
		t.Fatalf("the devices were synced %d times for a Retirer", dir.syncs)
	}
}

func TestADeviceHasTheTokenOrWebPushSubscriptionACommandWasSentTo(t *testing.T) {
	sub := func(endpoint string) *schemas.WebPushSubscription {
		return &schemas.WebPushSubscription{Endpoint: endpoint, P256dh: "k", Auth: "a"}
	}
	cases := []struct {
		name string
		dev  schemas.Device
		cmd  schemas.DeliveryCommand
		same bool
	}{
		{"the same token", schemas.Device{Token: "t"}, schemas.DeliveryCommand{Token: "t"}, true},
		{"another token", schemas.Device{Token: "u"}, schemas.DeliveryCommand{Token: "t"}, false},
		{"the same subscription endpoint, new keys", schemas.Device{WebPush: sub("https://p/1")}, schemas.DeliveryCommand{WebPush: &schemas.WebPushSubscription{Endpoint: "https://p/1"}}, true},
		{"another subscription endpoint", schemas.Device{WebPush: sub("https://p/2")}, schemas.DeliveryCommand{WebPush: sub("https://p/1")}, false},
		{"a subscription for a device now without one", schemas.Device{}, schemas.DeliveryCommand{WebPush: sub("https://p/1")}, false},
		{"a token for a device now subscribed, whatever its token", schemas.Device{Token: "t", WebPush: sub("https://p/1")}, schemas.DeliveryCommand{Token: "t"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameToken(&tc.dev, &tc.cmd); got != tc.same {
				t.Fatalf("sameToken %v, want %v", got, tc.same)
			}
		})
	}
}
