package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/topics"
)

func TestAReceiptTokenNamesItsDeviceAndOnlyItsHashIsKept(t *testing.T) {
	token, hash := newReceiptToken("acme/x", "u 1", "d/é")
	for _, c := range []struct {
		name string
		ok   bool
		got  string
	}{
		{"the hash is the SHA-256 of the whole token", hash == HashKey(token), ""},
		{"the token holds no hash of itself", !strings.Contains(token, hash), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !c.ok {
				t.Fatalf("token %q hash %q", token, hash)
			}
		})
	}
	t.Run("the device key in the token reads back, escapes and all", func(t *testing.T) {
		tenant, user, device, ok := deviceOfToken(token)
		if !ok || tenant != "acme/x" || user != "u 1" || device != "d/é" {
			t.Fatalf("got %q %q %q %v", tenant, user, device, ok)
		}
	})
	t.Run("two registrations get two tokens", func(t *testing.T) {
		if again, _ := newReceiptToken("acme/x", "u 1", "d/é"); again == token {
			t.Fatal("the same token twice")
		}
	})
	for _, bad := range []string{"", "herald-dev-key", "hrt1.", "hrt1.@@@.x", "hrt1." + "YS9i" + ".x", "hrt1.YS9iL2M"} {
		t.Run("a malformed token "+strings.TrimSpace(bad+" ")+"names no device", func(t *testing.T) {
			if _, _, _, ok := deviceOfToken(bad); ok {
				t.Fatalf("%q was read as a device", bad)
			}
		})
	}
}

func TestDeviceRoutesRefuseCallsWithoutAReceiptToken(t *testing.T) {
	s := unstarted(t, nil)
	for _, c := range []struct{ name, method, path, body, key string }{
		{"a receipt without a token", "POST", "/v1/receipts", `{"notificationId":"0123456789abcdef0123456789abcdef","kind":"displayed"}`, ""},
		{"a receipt with an API key instead", "POST", "/v1/receipts", `{"notificationId":"0123456789abcdef0123456789abcdef","kind":"opened"}`, keyA},
		{"a subscription change without a token", "PUT", "/v1/device/webpush", `{"endpoint":"https://push.example/1","p256dh":"p","auth":"a"}`, ""},
	} {
		t.Run(c.name+" is refused with 401", func(t *testing.T) {
			w := do(t, s, c.method, c.path, c.key, c.body)
			if w.Code != http.StatusUnauthorized || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("status %d, want 401: %s", w.Code, w.Body)
			}
			problemOf(t, w)
		})
	}
	for _, c := range []struct{ name, body string }{
		{"a receipt with a bad body and no token", `{"kind":"seen"}`},
		{"a subscription change with a bad body and no token", `{"endpoint":"http://push.example/1"}`},
	} {
		t.Run(c.name+" is refused with 401, before its body is judged", func(t *testing.T) {
			method, path := "POST", "/v1/receipts"
			if strings.Contains(c.name, "subscription") {
				method, path = "PUT", "/v1/device/webpush"
			}
			if w := do(t, s, method, path, "", c.body); w.Code != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401: %s", w.Code, w.Body)
			}
		})
	}
	t.Run("a browser's preflight from another origin is allowed", func(t *testing.T) {
		w := do(t, s, "OPTIONS", "/v1/receipts", "", "", "Origin", "https://app.example", "Access-Control-Request-Method", "POST",
			"Access-Control-Request-Headers", "authorization,content-type")
		if w.Code != http.StatusNoContent || w.Header().Get("Access-Control-Allow-Origin") != "*" ||
			!strings.Contains(w.Header().Get("Access-Control-Allow-Headers"), "Authorization") {
			t.Fatalf("status %d headers %v", w.Code, w.Header())
		}
	})
}

// TestReceiptsOnTheRealBroker registers a web device, sends a notification
// and reports receipts for it with the device's token: they reach
// herald.receipts with ids derived from delivery and kind, a receipt sent
// again shows once in the timeline, and a registration again makes the old
// token useless.
func TestReceiptsOnTheRealBroker(t *testing.T) {
	p := startPipeline(t, nil)
	const sub = `{"platform":"web","webPush":{"endpoint":"https://push.example/s/1","p256dh":"BNc","auth":"tBH"}}`
	var reg answer
	p.eventually(t, "the device registers", func() bool {
		reg = p.call(t, "PUT", "/v1/users/rc1/devices/browser-1", keyA, sub)
		return reg.status == 201
	})
	dev := decode[sdk.Device](t, reg)
	if !strings.HasPrefix(dev.ReceiptToken, receiptTokenPrefix) {
		t.Fatalf("registration answered no receipt token: %s", reg.body)
	}
	// With the device's token, the body's rules apply (without one, a
	// call is a 401 whatever its body: TestDeviceRoutesRefuseCallsWithoutAReceiptToken).
	for _, c := range []struct{ name, body, field string }{
		{"a receipt of an unknown kind", `{"notificationId":"0123456789abcdef0123456789abcdef","kind":"seen"}`, "kind"},
		{"a receipt without a notification id", `{"kind":"displayed"}`, "notificationId"},
		{"a receipt whose id is not a herald id", `{"notificationId":"XYZ","kind":"displayed"}`, "notificationId"},
	} {
		t.Run(c.name+" is refused naming the field", func(t *testing.T) {
			a := p.call(t, "POST", "/v1/receipts", dev.ReceiptToken, c.body)
			var prob struct {
				Errors []struct{ Field string } `json:"errors"`
			}
			if a.status != 422 || json.Unmarshal(a.body, &prob) != nil || len(prob.Errors) == 0 || prob.Errors[0].Field != c.field {
				t.Fatalf("%d %s, want a 422 naming %s", a.status, a.body, c.field)
			}
		})
	}
	if got := p.call(t, "GET", "/v1/users/rc1/devices/browser-1", keyA, ""); strings.Contains(string(got.body), dev.ReceiptToken) ||
		strings.Contains(string(got.body), "receiptToken") {
		t.Fatalf("GET shows the token: %s", got.body)
	}
	a := p.call(t, "POST", "/v1/notifications", keyA, `{"type":"order.shipped","recipientId":"rc1","title":"t","body":"b"}`, "Prefer", "wait=60")
	if a.status != 202 {
		t.Fatalf("send: %d %s", a.status, a.body)
	}
	id := decode[sdk.SendResult](t, a).Notifications[0].ID
	// The occurrence the push's payload names (the route stage does not
	// run here; its delivery id is derived from the occurrence, see
	// processors/route's TestDeliveryIDsComeFromTheOccurrence).
	var occurrence string
	for _, r := range testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Accepted)) {
		var acc schemas.Accepted
		if err := schemas.Decode(r.Value, &acc); err == nil && acc.NotificationID == id {
			occurrence = acc.OccurrenceID
		}
	}
	if occurrence == "" {
		t.Fatal("no occurrence on herald.accepted")
	}
	did := identity.DeliveryID(occurrence, "browser-1")
	receipt := func(token, kind string) answer {
		return p.call(t, "POST", "/v1/receipts", token,
			`{"notificationId":"`+id+`","occurrenceId":"`+occurrence+`","kind":"`+kind+`","type":"order.shipped","at":1}`)
	}
	for _, kind := range []string{"displayed", "displayed", "opened"} {
		r := receipt(dev.ReceiptToken, kind)
		if r.status != 202 {
			t.Fatalf("receipt %s: %d %s", kind, r.status, r.body)
		}
		if got := decode[sdk.ReceiptResult](t, r); got.ReceiptID != identity.ReceiptID(did, kind) || got.DeliveryID != did {
			t.Fatalf("receipt %s answered %+v", kind, got)
		}
	}
	t.Run("the receipts are on herald.receipts keyed by delivery id, with the device from the token", func(t *testing.T) {
		var kinds []string
		for _, r := range testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Receipts)) {
			var rc schemas.Receipt
			if err := schemas.Decode(r.Value, &rc); err != nil {
				t.Fatal(err)
			}
			if string(r.Key) != did || rc.Tenant != "ta" || rc.Recipient != "rc1" || rc.DeviceID != "browser-1" || rc.Type != "order.shipped" || rc.ClientAt != 1 {
				t.Fatalf("receipt %+v key %s", rc, r.Key)
			}
			kinds = append(kinds, rc.Kind)
		}
		if !slices.Equal(kinds, []string{"displayed", "displayed", "opened"}) {
			t.Fatalf("receipts %v", kinds)
		}
	})
	t.Run("the timeline shows displayed and opened once each, apart from the provider's acceptance", func(t *testing.T) {
		var receipts []string
		p.eventually(t, "the timeline shows the receipts", func() bool {
			got, ok := p.record(t, id, keyA)
			if !ok {
				return false
			}
			receipts = nil
			for _, e := range got.Timeline {
				if e.Kind == sdk.EventReceipt {
					receipts = append(receipts, e.Receipt)
				}
			}
			return len(receipts) >= 2
		})
		if !slices.Equal(receipts, []string{"displayed", "opened"}) {
			t.Fatalf("receipt events %v, want displayed then opened, once each", receipts)
		}
	})
	t.Run("a receipt without an occurrence (a payload from before occurrences) names the notification's own delivery id", func(t *testing.T) {
		r := p.call(t, "POST", "/v1/receipts", dev.ReceiptToken, `{"notificationId":"`+id+`","kind":"displayed"}`)
		if got := decode[sdk.ReceiptResult](t, r); r.status != 202 || got.DeliveryID != identity.DeliveryID(id, "browser-1") {
			t.Fatalf("receipt answered %d %+v", r.status, got)
		}
	})
	t.Run("registering the device again rotates its token", func(t *testing.T) {
		again := p.call(t, "PUT", "/v1/users/rc1/devices/browser-1", keyA, sub)
		if again.status != 200 {
			t.Fatalf("re-register: %d %s", again.status, again.body)
		}
		fresh := decode[sdk.Device](t, again).ReceiptToken
		if fresh == "" || fresh == dev.ReceiptToken {
			t.Fatalf("new token %q", fresh)
		}
		if r := receipt(dev.ReceiptToken, "dropped"); r.status != 401 {
			t.Fatalf("old token: %d, want 401", r.status)
		}
		if r := receipt(fresh, "dropped"); r.status != 202 {
			t.Fatalf("new token: %d %s", r.status, r.body)
		}
	})
	t.Run("the service worker's subscription change keeps the token and replaces the subscription", func(t *testing.T) {
		tok := decode[sdk.Device](t, p.call(t, "PUT", "/v1/users/rc1/devices/browser-1", keyA, sub)).ReceiptToken
		r := p.call(t, "PUT", "/v1/device/webpush", tok, `{"endpoint":"https://push.example/s/2","p256dh":"BNd","auth":"tBI"}`)
		if r.status != 200 {
			t.Fatalf("subscription change: %d %s", r.status, r.body)
		}
		got := decode[sdk.Device](t, p.call(t, "GET", "/v1/users/rc1/devices/browser-1", keyA, ""))
		if got.WebPush == nil || got.WebPush.Endpoint != "https://push.example/s/2" || got.ReceiptToken != "" {
			t.Fatalf("device %+v", got)
		}
		if r := receipt(tok, "opened"); r.status != 202 {
			t.Fatalf("token after the change: %d", r.status)
		}
		if r := receipt("hrt1.dGEvcmMxL290aGVy.AAAA", "opened"); r.status != 401 {
			t.Fatalf("a token of an unknown device: %d, want 401", r.status)
		}
	})
}
