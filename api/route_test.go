package api

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/stage"
	routestage "github.com/heraldhq/herald/processors/route"
	"github.com/heraldhq/herald/sdk"
)

func TestExplainAnswersForTheRouteStageOnTheRealBroker(t *testing.T) {
	policy := routestage.Policy{
		Rates:   map[string]routestage.RateLimit{"limited": {Max: 1, WindowMs: 3600_000}},
		Digests: map[string]routestage.Digest{"batched": {WindowMs: 600_000}},
	}
	chain, err := routestage.ParseChain("push > email if failed")
	if err != nil {
		t.Fatal(err)
	}
	policy.Chains = map[string]routestage.Chain{"chained": chain}
	// 03:00 UTC, inside a 22:00–07:00 UTC night, on a day the topics retain.
	now := time.Now().UTC().Truncate(24 * time.Hour).Add(3 * time.Hour)
	if now.After(time.Now()) {
		now = now.Add(-24 * time.Hour)
	}
	p := startPipeline(t, func(c *Config) {
		c.WaitForRoute = true
		c.Now = func() time.Time { return now }
	})
	// Timers on stream time only: the rate window stays open.
	p.startRoute(t, policy, 100000*time.Hour)

	for _, d := range []struct{ path, body string }{
		{"/v1/users/r1/devices/phone", `{"platform":"ios","token":"a"}`},
		{"/v1/users/r1/devices/pixel", `{"platform":"android","token":"b"}`},
		{"/v1/users/r2/devices/phone", `{"platform":"ios","token":"c"}`},
		{"/v1/users/r3/devices/phone", `{"platform":"ios","token":"d"}`},
		{"/v1/users/r3/devices/inbox", `{"email":"r3@example.com"}`},
	} {
		if a := p.call(t, "PUT", d.path, keyA, d.body); a.status != 201 {
			t.Fatalf("register %s: %d %s", d.path, a.status, a.body)
		}
	}
	if a := p.call(t, "PUT", "/v1/users/r2/preferences", keyA, `{"quietHours":{"start":"22:00","end":"07:00","timeZone":"UTC"}}`); a.status/100 != 2 {
		t.Fatalf("preferences: %d %s", a.status, a.body)
	}
	explain := func(t *testing.T, typ, user, key string) sdk.ExplainedNotification {
		t.Helper()
		a := p.call(t, "POST", "/v1/explain", keyA, `{"type":"`+typ+`","recipients":["`+user+`"],"title":"t","body":"b","dedupeKey":"`+key+`"}`)
		if a.status != 200 {
			t.Fatalf("explain: %d %s", a.status, a.body)
		}
		return decode[sdk.Explanation](t, a).Notifications[0]
	}
	p.eventually(t, "the replica holds the devices and preferences", func() bool {
		return len(explain(t, "news", "r1", "k").Devices) == 2 && explain(t, "news", "r2", "k").WouldDefer &&
			len(explain(t, "news", "r3", "k").Devices) == 2
	})
	t.Run("explain answers wouldFallback with the later steps of the type's chain", func(t *testing.T) {
		e := explain(t, "chained", "r3", "k")
		want := []sdk.ExplainedFallbackStep{{Step: 2, Channels: []string{"email"}, When: "email if failed",
			Devices: []sdk.ExplainedDevice{{Channel: "email", DeviceID: "inbox"}}}}
		if !e.WouldFallback || fmt.Sprint(e.Fallback) != fmt.Sprint(want) || !slices.Equal(e.Channels, []string{"apns"}) ||
			len(e.Devices) != 1 || e.Devices[0].DeviceID != "phone" {
			t.Fatalf("%+v, want the iPhone now and the address if it fails", e)
		}
		if e := explain(t, "news", "r3", "k"); e.WouldFallback || len(e.Fallback) != 0 {
			t.Fatalf("a type without a chain: %+v", e)
		}
	})

	t.Run("explain names the channels and devices a notification would reach", func(t *testing.T) {
		e := explain(t, "news", "r1", "k")
		if e.RouteOutcome != "routed" || !slices.Equal(e.Channels, []string{"apns", "fcm", "feed"}) ||
			!slices.Equal(e.Devices, []sdk.ExplainedDevice{{Channel: "apns", DeviceID: "phone"}, {Channel: "fcm", DeviceID: "pixel"}}) {
			t.Fatalf("%+v", e)
		}
	})
	t.Run("explain answers wouldDefer with the end of the quiet hours", func(t *testing.T) {
		e := explain(t, "news", "r2", "k")
		if !e.WouldDefer || e.DeferUntil != now.Add(4*time.Hour).UnixMilli() || e.WouldRateLimit || e.WouldDigest {
			t.Fatalf("%+v, want deferred until %s", e, now.Add(4*time.Hour))
		}
	})
	t.Run("explain answers wouldDigest for a digest type", func(t *testing.T) {
		if e := explain(t, "batched", "r1", "k"); !e.WouldDigest || e.RouteOutcome != "digested" {
			t.Fatalf("%+v", e)
		}
	})
	t.Run("a send with Prefer: wait answers its deliveries once the route stage has decided", func(t *testing.T) {
		deliveries := func(t *testing.T, user string) []string {
			t.Helper()
			a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"news","recipients":["`+user+`"],"title":"t","body":"b","dedupeKey":"wait"}`,
				"Prefer", "wait=60")
			if a.status != 202 {
				t.Fatalf("send: %d %s", a.status, a.body)
			}
			var out []string
			for _, d := range decode[sdk.SendResult](t, a).Deliveries {
				out = append(out, d.Channel+"/"+d.DeviceID+" "+d.Status)
			}
			return out
		}
		if got := deliveries(t, "r1"); !slices.Equal(got, []string{"apns/phone queued", "fcm/pixel queued", "feed/feed queued"}) {
			t.Fatalf("deliveries %q", got)
		}
		if got := deliveries(t, "r2"); !slices.Equal(got, []string{"apns/phone deferred", "feed/feed queued"}) {
			t.Fatalf("deliveries in quiet hours %q", got)
		}
	})
	t.Run("explain answers wouldRateLimit once the stage has counted the limit", func(t *testing.T) {
		if e := explain(t, "limited", "r1", "second"); e.WouldRateLimit {
			t.Fatalf("rate limited before any send: %+v", e)
		}
		if a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"limited","recipients":["r1"],"title":"t","body":"b","dedupeKey":"first"}`); a.status != 202 {
			t.Fatalf("send: %d %s", a.status, a.body)
		}
		p.eventually(t, "the route stage's counter reaches the replica", func() bool {
			return explain(t, "limited", "r1", "second").WouldRateLimit
		})
		if e := explain(t, "limited", "r1", "first"); !e.WouldDeduplicate || e.WouldRateLimit {
			t.Fatalf("a duplicate never reaches the rate limit: %+v", e)
		}
	})
}

// TestAReplayAnswersTheOriginalsDeliveriesOnAnotherInstance: a send that
// waited for the route stage answered its deliveries; its replay, sent to
// another API instance (which never saw the original), answers the same
// notifications, request id and deliveries, byte for byte.
func TestAReplayAnswersTheOriginalsDeliveriesOnAnotherInstance(t *testing.T) {
	p := startPipeline(t, func(c *Config) { c.WaitForRoute = true; c.InstanceID = "first" })
	p.startRoute(t, routestage.Policy{}, 0)
	if a := p.call(t, "PUT", "/v1/users/rp/devices/phone", keyA, `{"platform":"ios","token":"aa"}`); a.status != 201 {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	body := `{"type":"replayed","recipientId":"rp","title":"t","body":"b"}`
	var first answer
	var key string
	tries := 0
	p.eventually(t, "the route stage reads the device and routes a send to it", func() bool {
		tries++
		key = fmt.Sprint("rp-", tries)
		first = p.call(t, "POST", "/v1/notifications", keyA, strings.Replace(body, `"t"`, `"t`+key+`"`, 1), "Idempotency-Key", key, "Prefer", "wait=30")
		return first.status == 202 && strings.Contains(string(first.body), `"channel":"apns"`)
	})
	body = strings.Replace(body, `"t"`, `"t`+key+`"`, 1)
	if res := decode[sdk.SendResult](t, first); len(res.Deliveries) != 2 {
		t.Fatalf("the original answered %s, want its apns and feed deliveries", first.body)
	}
	p.restart(t, func(c *Config) { c.InstanceID = "second" })
	for _, prefer := range []string{"wait=30", ""} {
		again := p.call(t, "POST", "/v1/notifications", keyA, body, "Idempotency-Key", key, "Prefer", prefer)
		if again.status != 202 || again.header.Get(headerReplayed) != "true" || !bytes.Equal(again.body, first.body) {
			t.Fatalf("the replay (Prefer %q) on another instance answered %d (replayed %q)\n%s\nthe original answered\n%s",
				prefer, again.status, again.header.Get(headerReplayed), again.body, first.body)
		}
	}
}

// startRoute runs a route stage over the pipeline's topics until the test
// ends, with policy and TimerGrace grace (its default when 0).
func (p *pipeline) startRoute(t *testing.T, policy routestage.Policy, grace time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := routestage.Run(ctx, routestage.Options{
			Instance:   stage.Instance{Brokers: p.brokers, Group: "g-route-" + p.cat.Name(""), InstanceID: "r1", Logger: p.cfg.Logger},
			Catalog:    p.cat,
			Policy:     policy,
			TimerGrace: grace,
		})
		if err != nil {
			t.Errorf("route stage: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}
