package route

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/schemas"
)

// decideAt runs the pure decision function once, at base+at, on an empty
// state.
func decideAt(p Policy, n schemas.Accepted, at time.Duration, who Recipient) Result {
	none := func(string) (schemas.RouteEntry, bool) { return schemas.RouteEntry{}, false }
	return p.Decide(n, base.Add(at).UnixMilli(), Source{Topic: "accepted"}, none, who)
}

// summary is "outcome[:channel] ... | channel/device ..." of a result, in
// the result's order.
func summary(r Result) string {
	s := []string{outcomesOf(r.Decisions), "|"}
	for _, c := range r.Commands {
		s = append(s, c.Channel+"/"+c.DeviceID)
	}
	return strings.TrimSpace(strings.Join(s, " "))
}

func TestRateLimitsAndDigestsAtTheirBoundaries(t *testing.T) {
	hour := int64(3600_000)
	feedOnly := func(n schemas.Accepted) schemas.Accepted { n.Channels = []string{FeedChannel}; return n }
	cases := []struct {
		name   string
		policy Policy
		want   string
	}{
		{"a type limit of zero per window limits nothing",
			Policy{Rates: map[string]RateLimit{"x": {Max: 0, WindowMs: hour}}}, "routed | feed/feed"},
		{"a type limit without a window limits nothing",
			Policy{Rates: map[string]RateLimit{"x": {Max: 1, WindowMs: 0}}}, "routed | feed/feed"},
		{"a tenant limit of zero per window limits nothing, and hides the type's",
			Policy{Rates: map[string]RateLimit{"acme/x": {Max: 0, WindowMs: hour}, "x": {Max: 0, WindowMs: 0}}}, "routed | feed/feed"},
		{"a tenant limit without a window limits nothing",
			Policy{Rates: map[string]RateLimit{"acme/x": {Max: 1, WindowMs: 0}}}, "routed | feed/feed"},
		{"a digest without a window does not digest",
			Policy{Digests: map[string]Digest{"x": {WindowMs: 0}}}, "routed | feed/feed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := summary(decideAt(c.policy, feedOnly(note("x", "1")), 0, Recipient{})); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}

	t.Run("a tenant limit of one an hour is a limit, and a type with no entry is not limited", func(t *testing.T) {
		p := Policy{Rates: map[string]RateLimit{"acme/x": {Max: 1, WindowMs: hour}}}
		if _, ok := p.Rate("acme", "x"); !ok {
			t.Fatal("a tenant limit of one per hour is not a limit")
		}
		if _, ok := p.Rate("acme", "y"); ok {
			t.Fatal("a type with no entry is limited")
		}
	})

	t.Run("types sharing a digest key share one digest under that key", func(t *testing.T) {
		p := Policy{Digests: map[string]Digest{"c": {WindowMs: 600_000, Key: "social"}}}
		r := decideAt(p, note("c", "1"), 0, Recipient{})
		if len(r.State) != 1 || r.State[0].Key != digestKey("acme", "u1", "social") || r.State[0].Entry.DigestKey != "social" {
			t.Fatalf("state %+v, want the digest under key social", r.State)
		}
	})
	t.Run("a digest without a key is kept under its type", func(t *testing.T) {
		p := Policy{Digests: map[string]Digest{"c": {WindowMs: 600_000}}}
		r := decideAt(p, note("c", "1"), 0, Recipient{})
		if len(r.State) != 1 || r.State[0].Key != digestKey("acme", "u1", "c") {
			t.Fatalf("state %+v, want the digest under key c", r.State)
		}
	})
}

func TestDeliverAtItsEdges(t *testing.T) {
	withChannels := func(n schemas.Accepted, ch ...string) schemas.Accepted { n.Channels = ch; return n }
	quiet := &schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "UTC"}
	night := 11 * time.Hour // 23:00 UTC
	cases := []struct {
		name   string
		policy Policy
		n      schemas.Accepted
		at     time.Duration
		who    Recipient
		want   string
		detail string // of the notification's decision, the last one
	}{
		{name: "an opted-out channel with no device to reach is not audited as skipped",
			n: note("x", "1"), who: Recipient{Devices: fourDevices[2:], Prefs: &schemas.Preferences{Channels: map[string]bool{"apns": false}}},
			want: "routed | fcm/pixel webpush/firefox feed/feed"},
		{name: "the fallback used to the feed is named in the no_target decision",
			policy: Policy{Fallback: map[string]string{"x": FeedChannel}}, n: withChannels(note("x", "1"), "apns"),
			want: "no_target | feed/feed", detail: "no enabled device on apns; fallback feed"},
		{name: "a fallback to an opted-out feed is audited and not named as used",
			policy: Policy{Fallback: map[string]string{"x": FeedChannel}}, n: withChannels(note("x", "1"), "apns"),
			who:  Recipient{Prefs: &schemas.Preferences{Channels: map[string]bool{FeedChannel: false}}},
			want: "opted_out:feed no_target |", detail: "no enabled device on apns"},
		{name: "quiet hours never defer a notification with only a feed item",
			n: withChannels(note("x", "1"), FeedChannel), at: night, who: Recipient{Devices: fourDevices, Prefs: &schemas.Preferences{QuietHours: quiet}},
			want: "routed | feed/feed"},
		{name: "every channel opted out says so",
			n: withChannels(note("x", "1"), "apns", FeedChannel), who: Recipient{Devices: fourDevices[:1],
				Prefs: &schemas.Preferences{Channels: map[string]bool{"apns": false, FeedChannel: false}}},
			want: "opted_out:apns opted_out:feed opted_out |", detail: "every channel opted out"},
		{name: "a notification asking for no channel herald serves says so",
			n: withChannels(note("x", "1"), "sms"), who: Recipient{Devices: fourDevices},
			want: "opted_out |", detail: "no channel asked for"},
		{name: "devices given out of order are sent to in device-id order",
			n: withChannels(note("x", "1"), "apns"), who: Recipient{Devices: []schemas.Device{dev("ios-c", "ios"), dev("ios-b", "ios"), dev("ios-a", "ios")}},
			want: "routed | apns/ios-a apns/ios-b apns/ios-c"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := decideAt(c.policy, c.n, c.at, c.who)
			if got := summary(r); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			if d := r.Decisions[len(r.Decisions)-1]; c.detail != "" && d.Detail != c.detail {
				t.Fatalf("detail %q, want %q", d.Detail, c.detail)
			}
		})
	}

	t.Run("the notification's locale wins over the device's, which fills in when it has none", func(t *testing.T) {
		fr := dev("ios-a", "ios")
		fr.Locale = "fr"
		n := withChannels(note("x", "1"), "apns")
		if r := decideAt(Policy{}, n, 0, Recipient{Devices: []schemas.Device{fr}}); r.Commands[0].Locale != "fr" {
			t.Fatalf("locale %q, want the device's fr", r.Commands[0].Locale)
		}
		n.Locale = "de"
		if r := decideAt(Policy{}, n, 0, Recipient{Devices: []schemas.Device{fr}}); r.Commands[0].Locale != "de" {
			t.Fatalf("locale %q, want the notification's de", r.Commands[0].Locale)
		}
	})
}
