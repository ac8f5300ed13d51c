package route

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
)

var testTopics = Topics{Accepted: "accepted", Decisions: "decisions", Route: "route", Devices: "devices", Preferences: "preferences",
	Deliveries: map[string]string{"apns": "d.apns", "fcm": "d.fcm", "webpush": "d.webpush", "feed": "d.feed", "email": "d.email"}}

// base is a Saturday, 12:00 UTC.
var base = time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)

func note(typ, key string) schemas.Accepted {
	return schemas.Accepted{NotificationID: identity.DedupeID("acme", typ, "u1", key), RequestID: identity.NewRandomID(),
		Tenant: "acme", Type: typ, Recipient: "u1", Title: "title " + key, Body: "b"}
}

func dev(id, platform string) schemas.Device {
	return schemas.Device{Tenant: "acme", Recipient: "u1", DeviceID: id, Platform: platform, Token: "tok-" + id, Enabled: true}
}

// fourDevices: two iPhones, an Android phone and a browser.
var fourDevices = []schemas.Device{dev("ios-a", "ios"), dev("ios-b", "ios"), dev("pixel", "android"), dev("firefox", "web")}

// harness feeds notifications through one Task, committing after each
// record and each tick, and records what comes out.
type harness struct {
	t     *testing.T
	task  *Task
	clock int64 // wall clock for Tick, ms
	off   int64

	decisions []schemas.Decision
	commands  []schemas.DeliveryCommand
	state     map[string][]byte // the changelog, compacted
}

func newHarness(t *testing.T, p Policy, who Recipient) *harness {
	h := &harness{t: t, state: map[string][]byte{}}
	h.task = NewTask(p, testTopics, harnessPartition, StaticDirectory{schemas.RecipientKey("acme", "u1"): who}, func() int64 { return h.clock })
	return h
}

// harnessPartition is the input partition of the harness's task: not 0,
// so that a state record that forgets its partition (the zero value) is
// caught by collect.
const harnessPartition int32 = 3

func (h *harness) send(n schemas.Accepted, at time.Duration) {
	h.t.Helper()
	b, err := schemas.Encode(&n)
	if err != nil {
		h.t.Fatal(err)
	}
	var out stage.Out
	rec := &kgo.Record{Topic: "accepted", Partition: harnessPartition, Key: []byte(schemas.RecipientKey(n.Tenant, n.Recipient)), Value: b,
		Offset: h.off, Timestamp: base.Add(at)}
	h.off++
	if err := h.task.Process(rec, &out); err != nil {
		h.t.Fatal(err)
	}
	h.task.Commit()
	h.collect(&out)
}

// tick advances the wall clock to base+at and fires what is due.
func (h *harness) tick(at time.Duration) {
	h.clock = base.Add(at).UnixMilli()
	var out stage.Out
	h.task.Tick(&out)
	h.task.Commit()
	h.collect(&out)
}

func (h *harness) collect(out *stage.Out) {
	h.t.Helper()
	for _, r := range out.Records() {
		switch {
		case r.Topic == "decisions":
			var d schemas.Decision
			if err := schemas.Decode(r.Value, &d); err != nil {
				h.t.Fatal(err)
			}
			h.decisions = append(h.decisions, d)
		case r.Topic == "route":
			if r.Partition != harnessPartition {
				h.t.Fatalf("state record for partition %d, want the input's %d", r.Partition, harnessPartition)
			}
			h.state[string(r.Key)] = r.Value
			if r.Value == nil {
				delete(h.state, string(r.Key))
			}
		case strings.HasPrefix(r.Topic, "d."):
			var c schemas.DeliveryCommand
			if err := schemas.Decode(r.Value, &c); err != nil {
				h.t.Fatal(err)
			}
			if r.Topic != "d."+c.Channel || string(r.Key) != c.DeliveryID {
				h.t.Fatalf("command for %s on %s keyed %s", c.Channel, r.Topic, r.Key)
			}
			h.commands = append(h.commands, c)
		default:
			h.t.Fatalf("record on unexpected topic %s", r.Topic)
		}
	}
}

// outcomes lists "outcome" or "outcome:channel" per decision, in order.
func (h *harness) outcomes() string { return outcomesOf(h.decisions) }

// outcomesOf lists "outcome" or "outcome:channel" per decision, in order.
func outcomesOf(ds []schemas.Decision) string {
	var s []string
	for _, d := range ds {
		if d.Channel != "" {
			s = append(s, d.Outcome+":"+d.Channel)
		} else {
			s = append(s, d.Outcome)
		}
	}
	return strings.Join(s, " ")
}

// deliveries lists "channel/device" per command, sorted.
func (h *harness) deliveries() string {
	var s []string
	for _, c := range h.commands {
		s = append(s, c.Channel+"/"+c.DeviceID)
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

type send struct {
	n  schemas.Accepted
	at time.Duration
}

func TestDecide(t *testing.T) {
	paris := &schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "Europe/Paris"}
	noApns := &schemas.Preferences{Channels: map[string]bool{"apns": false, "fcm": true}}
	withChannels := func(n schemas.Accepted, ch ...string) schemas.Accepted { n.Channels = ch; return n }
	withTarget := func(n schemas.Accepted, d string) schemas.Accepted { n.TargetDevice = d; return n }
	badID := note("x", "1")
	badID.NotificationID = "not-an-id"
	disabled := dev("old", "ios")
	disabled.Enabled = false
	retired := dev("gone", "android")
	retired.RetiredReason = "Unregistered"
	night := 11 * time.Hour // 23:00 UTC, midnight in Paris in January: 7 hours to go

	cases := []struct {
		name       string
		policy     Policy
		who        Recipient
		sends      []send
		tickAt     time.Duration // 0: no tick
		outcomes   string
		deliveries string
	}{
		{name: "two iPhones, an Android phone and a browser get four pushes and one feed item",
			who: Recipient{Devices: fourDevices}, sends: []send{{note("x", "1"), 0}},
			outcomes: "routed", deliveries: "apns/ios-a apns/ios-b fcm/pixel feed/feed webpush/firefox"},
		{name: "a disabled or retired device is never used",
			who: Recipient{Devices: []schemas.Device{disabled, retired, dev("ok", "web")}}, sends: []send{{note("x", "1"), 0}},
			outcomes: "routed", deliveries: "feed/feed webpush/ok"},
		{name: "a target device narrows the pushes to it and keeps the feed item",
			who: Recipient{Devices: fourDevices}, sends: []send{{withTarget(note("x", "1"), "pixel"), 0}},
			outcomes: "routed", deliveries: "fcm/pixel feed/feed"},
		{name: "the channels asked for are the only ones used",
			who: Recipient{Devices: fourDevices}, sends: []send{{withChannels(note("x", "1"), "webpush"), 0}},
			outcomes: "routed", deliveries: "webpush/firefox"},
		{name: "a rate limit of two an hour limits the third and not the next hour's",
			policy:   Policy{Rates: map[string]RateLimit{"x": {Max: 2, WindowMs: 3600_000}}},
			who:      Recipient{Devices: fourDevices[3:]},
			sends:    []send{{note("x", "1"), 0}, {note("x", "2"), time.Minute}, {note("x", "3"), 2 * time.Minute}, {note("x", "4"), time.Hour}},
			outcomes: "routed routed rate_limited routed", deliveries: "feed/feed feed/feed feed/feed webpush/firefox webpush/firefox webpush/firefox"},
		{name: "a rate-limited notification does not count against the limit",
			policy:   Policy{Rates: map[string]RateLimit{"x": {Max: 1, WindowMs: 3600_000}}},
			sends:    []send{{note("x", "1"), 0}, {note("x", "2"), time.Minute}, {note("x", "3"), time.Hour}, {note("x", "4"), time.Hour + time.Minute}},
			outcomes: "no_target rate_limited no_target rate_limited", deliveries: "feed/feed feed/feed"},
		{name: "a tenant's limit wins over the type's",
			policy:   Policy{Rates: map[string]RateLimit{"x": {Max: 5, WindowMs: 3600_000}, "acme/x": {Max: 1, WindowMs: 3600_000}}},
			sends:    []send{{note("x", "1"), 0}, {note("x", "2"), time.Minute}},
			outcomes: "no_target rate_limited", deliveries: "feed/feed"},
		{name: "types are limited apart",
			policy:   Policy{Rates: map[string]RateLimit{"x": {Max: 1, WindowMs: 3600_000}}},
			sends:    []send{{note("x", "1"), 0}, {note("y", "1"), time.Minute}},
			outcomes: "no_target no_target", deliveries: "feed/feed feed/feed"},
		{name: "a digest buffers three notifications and sends one at the window's end",
			policy: Policy{Digests: map[string]Digest{"c": {WindowMs: 600_000}}}, who: Recipient{Devices: fourDevices[2:3]},
			sends:    []send{{note("c", "1"), 0}, {note("c", "2"), time.Minute}, {note("c", "3"), 2 * time.Minute}},
			tickAt:   10 * time.Minute,
			outcomes: "digested digested digested routed", deliveries: "fcm/pixel feed/feed"},
		{name: "a digest's window is fixed by its first notification, the next opens a new one",
			policy: Policy{Digests: map[string]Digest{"c": {WindowMs: 600_000}}},
			sends:  []send{{note("c", "1"), 0}, {note("c", "2"), 11 * time.Minute}},
			// the second record's time fires the first digest before it is decided
			outcomes: "digested no_target digested", deliveries: "feed/feed"},
		{name: "a digest is rate limited as notifications, before buffering",
			policy: Policy{Rates: map[string]RateLimit{"c": {Max: 1, WindowMs: 3600_000}}, Digests: map[string]Digest{"c": {WindowMs: 600_000}}},
			sends:  []send{{note("c", "1"), 0}, {note("c", "2"), time.Minute}}, tickAt: time.Hour,
			outcomes: "digested rate_limited no_target", deliveries: "feed/feed"},
		{name: "an opted-out channel is never used and audited",
			who: Recipient{Devices: fourDevices, Prefs: noApns}, sends: []send{{note("x", "1"), 0}},
			outcomes: "opted_out:apns routed", deliveries: "fcm/pixel feed/feed webpush/firefox"},
		{name: "an opted-out type sends nothing",
			who: Recipient{Devices: fourDevices, Prefs: &schemas.Preferences{OptedOutTypes: []string{"x"}}}, sends: []send{{note("x", "1"), 0}},
			outcomes: "opted_out"},
		{name: "every channel opted out is an audited skip",
			who:      Recipient{Devices: fourDevices[:1], Prefs: &schemas.Preferences{Channels: map[string]bool{"apns": false, "feed": false}}},
			sends:    []send{{withChannels(note("x", "1"), "apns", "feed"), 0}},
			outcomes: "opted_out:apns opted_out:feed opted_out"},
		{name: "no device is no_target and the feed item still goes",
			sends: []send{{note("x", "1"), 0}}, outcomes: "no_target", deliveries: "feed/feed"},
		{name: "no device on the one channel asked for uses the type's fallback",
			policy: Policy{Fallback: map[string]string{"x": "feed"}},
			sends:  []send{{withChannels(note("x", "1"), "apns"), 0}}, outcomes: "no_target", deliveries: "feed/feed"},
		{name: "no device and no fallback sends nothing",
			sends: []send{{withChannels(note("x", "1"), "apns"), 0}}, outcomes: "no_target"},
		{name: "quiet hours defer the pushes to the window's end and not the feed item",
			who: Recipient{Devices: fourDevices[:2], Prefs: &schemas.Preferences{QuietHours: paris}}, sends: []send{{note("x", "1"), night}},
			outcomes: "deferred", deliveries: "feed/feed"},
		{name: "deferred pushes are released at the window's end, once",
			who: Recipient{Devices: fourDevices[:2], Prefs: &schemas.Preferences{QuietHours: paris}}, sends: []send{{note("x", "1"), night}},
			tickAt:   night + 7*time.Hour,
			outcomes: "deferred routed", deliveries: "apns/ios-a apns/ios-b feed/feed"},
		{name: "deferred pushes wait while the window lasts",
			who: Recipient{Devices: fourDevices[:2], Prefs: &schemas.Preferences{QuietHours: paris}}, sends: []send{{note("x", "1"), night}},
			tickAt:   night + 7*time.Hour - time.Millisecond,
			outcomes: "deferred", deliveries: "feed/feed"},
		{name: "an urgent type goes through quiet hours",
			policy: Policy{Urgent: map[string]bool{"x": true}},
			who:    Recipient{Devices: fourDevices[:1], Prefs: &schemas.Preferences{QuietHours: paris}}, sends: []send{{note("x", "1"), night}},
			outcomes: "routed", deliveries: "apns/ios-a feed/feed"},
		{name: "a digest ending in quiet hours is deferred in turn",
			policy: Policy{Digests: map[string]Digest{"c": {WindowMs: 600_000}}},
			who:    Recipient{Devices: fourDevices[:1], Prefs: &schemas.Preferences{QuietHours: paris}}, sends: []send{{note("c", "1"), night}},
			tickAt:   night + 10*time.Minute,
			outcomes: "digested deferred", deliveries: "feed/feed"},
		{name: "a registered address gets an email along with the pushes",
			who: Recipient{Devices: append([]schemas.Device{dev("mail", "email")}, fourDevices...)}, sends: []send{{note("x", "1"), 0}},
			outcomes: "routed", deliveries: "apns/ios-a apns/ios-b email/mail fcm/pixel feed/feed webpush/firefox"},
		{name: "quiet hours defer the pushes and not the email",
			who:   Recipient{Devices: []schemas.Device{dev("mail", "email"), fourDevices[0]}, Prefs: &schemas.Preferences{QuietHours: paris}},
			sends: []send{{note("x", "1"), night}}, outcomes: "deferred", deliveries: "email/mail feed/feed"},
		{name: "a type whose email waits out quiet hours defers it with the pushes",
			policy: Policy{QuietEmail: map[string]bool{"x": true}},
			who:    Recipient{Devices: []schemas.Device{dev("mail", "email"), fourDevices[0]}, Prefs: &schemas.Preferences{QuietHours: paris}},
			sends:  []send{{note("x", "1"), night}}, outcomes: "deferred", deliveries: "feed/feed"},
		{name: "a type's email deferred by quiet hours is released at the window's end, once",
			policy: Policy{QuietEmail: map[string]bool{"x": true}},
			who:    Recipient{Devices: []schemas.Device{dev("mail", "email")}, Prefs: &schemas.Preferences{QuietHours: paris}},
			sends:  []send{{note("x", "1"), night}}, tickAt: night + 7*time.Hour,
			outcomes: "deferred routed", deliveries: "email/mail feed/feed"},
		{name: "an address alone is a target: not no_target, so no fallback",
			policy: Policy{Fallback: map[string]string{"x": "feed"}}, who: Recipient{Devices: []schemas.Device{dev("mail", "email")}},
			sends: []send{{withChannels(note("x", "1"), "apns", "email"), 0}}, outcomes: "routed", deliveries: "email/mail"},
		{name: "an opted-out email channel is audited and leaves no target",
			who:   Recipient{Devices: []schemas.Device{dev("mail", "email")}, Prefs: &schemas.Preferences{Channels: map[string]bool{"email": false}}},
			sends: []send{{note("x", "1"), 0}}, outcomes: "opted_out:email no_target", deliveries: "feed/feed"},
		{name: "a notification with a malformed id is rejected",
			who: Recipient{Devices: fourDevices}, sends: []send{{badID, 0}}, outcomes: "rejected"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.policy, c.who)
			for _, s := range c.sends {
				h.send(s.n, s.at)
			}
			if c.tickAt > 0 {
				h.tick(c.tickAt)
			}
			if got := h.outcomes(); got != c.outcomes {
				t.Errorf("decisions %q, want %q", got, c.outcomes)
			}
			if got := h.deliveries(); got != c.deliveries {
				t.Errorf("deliveries %q, want %q", got, c.deliveries)
			}
		})
	}
}

func TestDeliveryCommandsCarryTheIdentityIDs(t *testing.T) {
	h := newHarness(t, Policy{}, Recipient{Devices: fourDevices})
	n := note("x", "1")
	h.send(n, 0)
	ids := map[string]bool{}
	for _, c := range h.commands {
		if c.DeliveryID != identity.DeliveryID(n.NotificationID, c.DeviceID) || ids[c.DeliveryID] {
			t.Errorf("%s/%s: delivery id %s is not the identity one or not unique", c.Channel, c.DeviceID, c.DeliveryID)
		}
		ids[c.DeliveryID] = true
		if c.CollapseID != n.NotificationID {
			t.Errorf("%s: collapse id %s", c.Channel, c.CollapseID)
		}
		switch c.Channel {
		case "apns":
			if c.APNsID != identity.APNsID(n.NotificationID) || c.Token != "tok-"+c.DeviceID {
				t.Errorf("apns command %+v", c)
			}
		case "webpush":
			if topic, _ := identity.WebPushTopic(n.NotificationID); c.Topic != topic {
				t.Errorf("webpush topic %s, want %s", c.Topic, topic)
			}
		}
	}
}

func TestADigestListsCountTitlesAndIDs(t *testing.T) {
	h := newHarness(t, Policy{Digests: map[string]Digest{"c": {WindowMs: 600_000}}}, Recipient{})
	var want []string
	for i := range 3 {
		n := note("c", fmt.Sprint(i))
		want = append(want, n.NotificationID)
		h.send(n, time.Duration(i)*time.Minute)
	}
	h.tick(10 * time.Minute)
	if len(h.commands) != 1 {
		t.Fatalf("%d commands, want the digest's feed item", len(h.commands))
	}
	c := h.commands[0]
	var p struct {
		Digest struct {
			Count int `json:"count"`
			Items []struct {
				NotificationID, Title string
			} `json:"items"`
		} `json:"digest"`
	}
	if err := json.Unmarshal(c.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Digest.Count != 3 || len(p.Digest.Items) != 3 || c.Title != "3 new notifications" || c.Body != "title 0\ntitle 1\ntitle 2" {
		t.Fatalf("digest %q / %q / %s", c.Title, c.Body, c.Payload)
	}
	for i, it := range p.Digest.Items {
		if it.NotificationID != want[i] {
			t.Errorf("item %d is %s, want %s", i, it.NotificationID, want[i])
		}
	}
	if len(h.state) != 0 {
		t.Errorf("state left after the digest: %v", h.state)
	}
}

func TestStateIsTombstonedOnceDone(t *testing.T) {
	h := newHarness(t, Policy{Rates: map[string]RateLimit{"x": {Max: 1, WindowMs: 60_000}}},
		Recipient{Devices: fourDevices[:1], Prefs: &schemas.Preferences{QuietHours: &schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "UTC"}}})
	h.send(note("x", "1"), 11*time.Hour) // 23:00 UTC: deferred, counted
	if len(h.state) != 2 {
		t.Fatalf("state %v, want a counter and a deferral", h.state)
	}
	h.tick(19 * time.Hour)
	if len(h.state) != 0 {
		t.Fatalf("state %v left after the window and the night", h.state)
	}
}

func TestTheDecisionListsItsDeliveries(t *testing.T) {
	h := newHarness(t, Policy{}, Recipient{Devices: fourDevices[:2], Prefs: &schemas.Preferences{
		QuietHours: &schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "UTC"}}})
	n := note("x", "1")
	h.send(n, 11*time.Hour) // 23:00 UTC
	var got []string
	for _, d := range h.decisions[0].Deliveries {
		got = append(got, fmt.Sprintf("%s/%s %s %d", d.Channel, d.DeviceID, d.State, d.NotBefore))
		if d.DeliveryID != identity.DeliveryID(n.NotificationID, d.DeviceID) {
			t.Errorf("delivery %s of %s", d.DeliveryID, d.DeviceID)
		}
	}
	until := base.Add(19 * time.Hour).UnixMilli()
	want := []string{fmt.Sprintf("apns/ios-a deferred %d", until), fmt.Sprintf("apns/ios-b deferred %d", until), "feed/feed queued 0"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("deliveries %q, want %q", got, want)
	}
}

// TestDeliveryIDsComeFromTheOccurrence: a notification accepted again
// after its dedupe window (same notification id, a new occurrence) is a
// new delivery with a new apns-id, shown in place of the first by its
// collapse id and Web Push Topic; a record written before occurrences
// existed keeps the ids it always had.
func TestDeliveryIDsComeFromTheOccurrence(t *testing.T) {
	routeOf := func(n schemas.Accepted) map[string]schemas.DeliveryCommand {
		h := newHarness(t, Policy{}, Recipient{Devices: []schemas.Device{dev("ios-a", "ios"), dev("firefox", "web")}})
		h.send(n, 0)
		// The decision names the occurrence too (the webhook completion
		// stage keys a notification's send.completed on it).
		if len(h.decisions) != 1 || h.decisions[0].OccurrenceID != n.OccurrenceID {
			t.Fatalf("decisions %+v, want one naming occurrence %q", h.decisions, n.OccurrenceID)
		}
		byChannel := map[string]schemas.DeliveryCommand{}
		for _, c := range h.commands {
			byChannel[c.Channel] = c
		}
		if len(byChannel) != 3 {
			t.Fatalf("commands on channels %v, want apns, webpush and feed", byChannel)
		}
		return byChannel
	}
	first, again, legacy := note("x", "1"), note("x", "1"), note("x", "1")
	first.OccurrenceID = identity.OccurrenceID(first.NotificationID, 1_000)
	again.OccurrenceID = identity.OccurrenceID(again.NotificationID, 90_000_000)
	a, b, old := routeOf(first), routeOf(again), routeOf(legacy)
	for _, ch := range []string{"apns", "webpush", "feed"} {
		t.Run(ch+": the second occurrence is another delivery of the same notification", func(t *testing.T) {
			if a[ch].DeliveryID == b[ch].DeliveryID {
				t.Fatalf("both occurrences are delivery %s", a[ch].DeliveryID)
			}
			if want := identity.DeliveryID(first.OccurrenceID, a[ch].DeviceID); a[ch].DeliveryID != want {
				t.Fatalf("delivery %s, want DeliveryID(occurrence, device) = %s", a[ch].DeliveryID, want)
			}
			if a[ch].NotificationID != b[ch].NotificationID || a[ch].CollapseID != b[ch].CollapseID || a[ch].CollapseID != first.NotificationID {
				t.Fatalf("notification/collapse ids %s/%s and %s/%s, want both %s", a[ch].NotificationID, a[ch].CollapseID,
					b[ch].NotificationID, b[ch].CollapseID, first.NotificationID)
			}
			if a[ch].OccurrenceID != first.OccurrenceID || b[ch].OccurrenceID != again.OccurrenceID {
				t.Fatalf("commands carry occurrences %s and %s, want %s and %s", a[ch].OccurrenceID, b[ch].OccurrenceID, first.OccurrenceID, again.OccurrenceID)
			}
		})
		t.Run(ch+": a notification accepted before occurrences existed keeps its delivery id", func(t *testing.T) {
			if want := identity.DeliveryID(legacy.NotificationID, old[ch].DeviceID); old[ch].DeliveryID != want {
				t.Fatalf("delivery %s, want DeliveryID(notification, device) = %s", old[ch].DeliveryID, want)
			}
		})
	}
	t.Run("apns: each occurrence has its own apns-id, legacy records the notification's", func(t *testing.T) {
		if a["apns"].APNsID == b["apns"].APNsID || a["apns"].APNsID != identity.APNsID(first.OccurrenceID) ||
			old["apns"].APNsID != identity.APNsID(legacy.NotificationID) {
			t.Fatalf("apns-ids %s, %s and legacy %s", a["apns"].APNsID, b["apns"].APNsID, old["apns"].APNsID)
		}
	})
	t.Run("webpush: both occurrences share the Topic, so the push service replaces the first", func(t *testing.T) {
		if a["webpush"].Topic == "" || a["webpush"].Topic != b["webpush"].Topic {
			t.Fatalf("topics %q and %q", a["webpush"].Topic, b["webpush"].Topic)
		}
	})
}
